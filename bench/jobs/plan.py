"""Where a job runs: (launch config, host selection) -> resources, launcher and device, before anything starts.

    from bench.jobs.plan import plan_resources
    p = plan_resources(cfg, HostSelection(hostfile="hostfiles/tesla"))
    p.resources, p.launcher, p.device     # {"tesla-node1": [0], ...}, "pdsh", "cuda"

bench run, bench comm, sweeps, validate and tune plan the same way, so a
point of a sweep runs where `bench run` with the same options would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bench.cluster.hostfile import HostSelection, parse_hostfile, resolve_resources
from bench.cluster import accel
from bench.core.config import LaunchConfig
from bench.core.accel_names import by_device
from bench.core.errors import BadInput
from bench.launch.registry import default_for, get


@dataclass(frozen=True, slots=True)
class Placement:
    resources: dict[str, list[int]]     # host -> slots, in hostfile order
    slots_of: dict[str, int] | None     # the hostfile's slot counts (None: this machine)
    launcher: str
    device: str                         # the device planned from this node; the probe may change it

    @property
    def world(self) -> int:
        return sum(len(s) for s in self.resources.values())


# The GPU backend's words: its visible-devices variable and the tool that counts its GPUs.
_GPU = by_device("cuda")

def visible_gpus(environ: dict[str, str] | None = None) -> list[int]:
    """The GPUs of this node a job may use, by the vendor tool's index (PCI bus order), torch-free.

    All that the accelerator backend's tool lists (bench.cluster.accel), or
    those its visible-devices variable set here names: the user's choice is
    the GPUs the ranks use (bench.launch.local passes them to DeepSpeed as
    --include localhost:IDS, which sets each rank's variable, with the
    backend's device order so an index means what the vendor's tools number).
    """
    env = os.environ if environ is None else environ
    cvd = env.get(_GPU["visible_devices_env"])
    if cvd is not None and not cvd.strip():
        return []
    count = accel.local_detection().count
    if cvd is None:
        return list(range(count))
    ids = []
    for item in cvd.split(","):
        item = item.strip()
        if not item.isdigit():
            raise BadInput(f"{_GPU['visible_devices_env']}: {item!r}: bench picks GPUs by their index as "
                           f"{_GPU['count_tool']} numbers them; give indices (GPU UUIDs and MIG instances are not "
                           "supported)")
        if count and int(item) >= count:
            raise BadInput(f"{_GPU['visible_devices_env']}: GPU {item} does not exist ({_GPU['count_tool']} lists "
                           f"{count})")
        ids.append(int(item))
    return ids


def local_gpu_count() -> int:
    """GPUs this node may use without importing torch, 0 when none answer."""
    return len(visible_gpus())


def plan_resources(cfg: LaunchConfig, hosts: HostSelection) -> Placement:
    """The resources, hostfile slots, launcher and device of a job; BadInput names what cannot be."""
    visible = visible_gpus() if cfg.device != "cpu" else []
    gpus_here = len(visible)
    device = cfg.device if cfg.device != "auto" else ("cuda" if gpus_here else "cpu")
    implicit = get(cfg.launcher).implicit_hosts() if cfg.launcher and not hosts.hostfile else None
    if hosts.hostfile or implicit is not None:
        slots_of = parse_hostfile(hosts.hostfile) if hosts.hostfile else implicit
        resources = resolve_resources(slots_of, hosts.include, hosts.exclude,
                                      -1 if hosts.num_nodes is None else hosts.num_nodes, cfg.gpus or -1)
        launcher = cfg.launcher or default_for(len(resources))
        if not get(launcher).remote and len(resources) > 1:
            raise BadInput(f"--launcher local: the hostfile selects {len(resources)} hosts; use pdsh, openmpi or slurm")
        if not get(launcher).remote:
            # This machine: the hostfile's slots are its GPUs' indices, kept as given (host:0,2 is GPUs 0 and 2).
            if device == "cuda" and os.environ.get(_GPU["visible_devices_env"]):
                raise BadInput(f"{_GPU['visible_devices_env']}: set here while the hostfile's slots choose the GPUs "
                               "too; give one of them")
            resources = {"localhost": next(iter(resources.values()))}
        return Placement(resources, slots_of, launcher, device)
    for option, given in (("--include", hosts.include), ("--exclude", hosts.exclude),
                          ("--num-nodes", hosts.num_nodes is not None)):
        if given:
            raise BadInput(f"{option}: needs --hostfile")
    if cfg.launcher is not None and get(cfg.launcher).remote:
        raise BadInput(f"--launcher {cfg.launcher}: needs --hostfile")
    if device == "cuda" and cfg.device == "cuda" and not gpus_here:
        raise BadInput(f"--device cuda: no GPU is visible on this node ({_GPU['count_tool']} lists none)")
    n = cfg.gpus or (gpus_here if device == "cuda" else 2)
    if device == "cuda" and n > gpus_here:
        raise BadInput(f"--gpus {n}: this node has {gpus_here} GPU(s)")
    # On GPUs a slot is the GPU's index (the first n of those visible here); CPU ranks are numbered.
    slots = visible[:n] if device == "cuda" else list(range(n))
    return Placement({"localhost": slots}, None, default_for(1), device)
