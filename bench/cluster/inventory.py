"""Every node's inventory, taken the way the job will reach the nodes: ssh, mpirun or srun.

    nodes, unreachable = probe_any("ssh", {"n1": [0], "n2": [0, 1]}, timeout=60)
    selected(nodes[1])      # that node's inventory limited to the GPUs of its slots

Over ssh each host runs `<python> -m bench probe --local --json` (the same
interpreter path, as on a shared filesystem or in one image); over MPI or
srun, bench.cluster.probe_launch (one task per slot, merged per node by
bench.cluster.task_gpus). Both return (inventories of the hosts that
answered, {host: why not} for the others).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bench.cluster.hostfile import HostSelection
from bench.cluster.slurm import slurm_hosts
from bench.core.accel_names import by_device
from bench.core.config import LAUNCHERS
from bench.core.errors import BadInput
from bench.core.options import csv_parser, moment, opt, seconds
from bench.core.precision import PRECISIONS

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class HealthAsk:
    """What the probe's process also reads of its node's health (bench.cluster.health), and how."""

    since: float | None = None       # kernel-log events from this Unix time on (None: since boot)
    dcgm_level: int | None = None    # dcgmi diag -r N where dcgmi answers
    folders: tuple[str, ...] = ()    # folders whose free space counts (bench's --out, /tmp)

    def argv(self) -> list[str]:
        """The same request as `bench probe --local` options."""
        return ["--health", *(["--since", repr(self.since)] if self.since is not None else []),
                *(["--dcgm", str(self.dcgm_level)] if self.dcgm_level else []),
                *(["--health-folders", ",".join(self.folders)] if self.folders else [])]


def _why(result) -> str:
    if result.error:
        return result.error
    lines = [ln.strip() for ln in (result.stderr or "").splitlines() if ln.strip()]
    return f"exited {result.rc}" + (f": {lines[-1]}" if lines else "")


def probe_hosts(resources: dict[str, list[int]], timeout: float, with_torch: bool,
                container_exec: str | None = None, health: HealthAsk | None = None) -> tuple[list[dict], dict[str, str]]:
    """Inventories of the hosts that answered (host = the hostfile's name), and why the others did not."""
    from bench.cluster.container import remote_python
    from bench.cluster.remote import run_on_hosts

    argv = [*remote_python(container_exec), "-m", "bench", "probe", "--local", "--json"] + (
        ["--with-torch"] if with_torch else []) + (health.argv() if health else [])
    try:
        results = run_on_hosts(list(resources), argv, timeout=timeout)
    except ValueError as e:  # a host name that must not reach ssh; the hostfile parser should have said so
        raise BadInput(f"--hostfile: {e}") from None
    nodes, unreachable = [], {}
    for host, r in results.items():
        if not r.ok:
            unreachable[host] = _why(r)
            continue
        try:
            inv = json.loads(r.stdout)["nodes"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            first = (r.stdout.strip().splitlines() or ["nothing"])[0][:200]
            unreachable[host] = f"answered no probe JSON (stdout began: {first!r})"
            continue
        inv["host"] = host
        inv["slots"] = resources[host]
        nodes.append(inv)
    return nodes, unreachable


def probe_any(launcher: str, resources: dict[str, list[int]], timeout: float,
              with_torch: bool = False, container_exec: str | None = None,
              health: HealthAsk | None = None) -> tuple[list[dict], dict[str, str]]:
    """Inventories over ssh, MPI or srun (or of this machine: local), the way the job itself will reach the nodes;
    with health, each inventory's "health" is its node's report, read by the same process."""
    if launcher == "local":
        from bench.cluster.probe import local_inventory
        inv = local_inventory(with_torch=True if with_torch else None, health=health)
        return [{**inv, "host": host, "slots": slots} for host, slots in resources.items()], {}
    if launcher == "openmpi":
        from bench.cluster.probe_launch import probe_via_mpi
        return probe_via_mpi(resources, timeout, container_exec=container_exec, health=health)
    if launcher == "slurm":
        from bench.cluster.probe_launch import probe_via_srun
        return probe_via_srun(resources, timeout, container_exec=container_exec, with_torch=with_torch,
                              health=health)
    return probe_hosts(resources, timeout, with_torch, container_exec, health)


def selected(inv: dict) -> dict:
    """The inventory limited to the GPUs its slots select: what a run would use (all_gpu_count: before)."""
    slots = inv.get("slots")
    if slots is None or not inv.get("gpus"):
        return inv
    return {**inv, "gpus": [g for g in inv["gpus"] if g.get("index") in slots], "all_gpu_count": len(inv["gpus"])}


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeConfig:
    """What bench probe asks of the nodes and how it judges them (the hosts are a HostSelection)."""

    local: bool = opt("probe this node only (what each remote host runs)", default=False)
    launcher: str = opt("bench run's launcher names: pdsh: one ssh per host, as bench run's pdsh launch reaches "
                        "them; openmpi: one mpirun rank per host; slurm: one srun task per slot inside a "
                        "Slurm allocation (merged per node); local: this node", default="pdsh", choices=LAUNCHERS,
                        value_aliases={"ssh": "pdsh"})
    with_torch: bool = opt("import torch for its CUDA, NCCL and arch list even where no GPU was found",
                           default=False)
    precision: str | None = opt("fail the verdict unless every node can train in this precision", default=None,
                                choices=PRECISIONS)
    micro_batch: int | None = opt("per-GPU batch the verdict checks against the smallest GPU memory", default=None,
                                  metavar="N")
    mem_per_sample_gb: float | None = opt("GPU memory one sample of the micro batch needs, in GiB", default=None,
                                          metavar="GIB")
    # Not --timeout: elsewhere that is the seconds without progress before a job is declared hung.
    timeout: float = opt(f"seconds each host may take to answer (default {DEFAULT_TIMEOUT_S:g}: importing torch on "
                         "a cold node is slow; or 90s, 5m)", default=DEFAULT_TIMEOUT_S, metavar="S",
                         flag="--probe-timeout", parse=seconds, aliases=("--timeout",))
    health: bool = opt(f"also read each node's own health: GPU counters ({by_device('cuda')['health_sources']}), "
                       "the kernel log's Xid events, NVLink and InfiniBand ports, free space (bench validate's "
                       "health check)",
                       default=False)
    # validate's name for the same idea; --health-since took Unix seconds only.
    since: float | None = opt("with --health: kernel-log events since TIME, ISO 8601 or Unix seconds, e.g. after a "
                              "GPU reset (default: since boot)", default=None, parse=moment, metavar="TIME",
                              aliases=("--health-since",))
    dcgm: str = opt("with --health: also run DCGM's diagnostic (dcgmi diag -r N) at this level where dcgmi answers: "
                    "off, or 1-3 (validate's --dcgm levels)", default="off", choices=("off", "1", "2", "3"))
    health_folders: tuple[str, ...] = opt("with --health: folders whose free space to check", default=("/tmp",),
                                          parse=csv_parser(str, dedupe=True), metavar="LIST")

    def health_ask(self) -> HealthAsk | None:
        level = None if self.dcgm == "off" else int(self.dcgm)
        return HealthAsk(self.since, level, self.health_folders) if self.health else None

    def __post_init__(self) -> None:
        if self.micro_batch is not None and self.micro_batch < 1:
            raise BadInput(f"--micro-batch: must be >= 1, not {self.micro_batch}")
        if self.mem_per_sample_gb is not None and not self.mem_per_sample_gb > 0:
            raise BadInput(f"--mem-per-sample-gb: must be > 0, not {self.mem_per_sample_gb}")
        if not self.timeout > 0:
            raise BadInput(f"--probe-timeout: must be > 0, not {self.timeout}")
        for given, flag in ((self.since is not None, "--since"), (self.dcgm != "off", "--dcgm")):
            if given and not self.health:
                raise BadInput(f"{flag}: reads a node's health; add --health")


def probe_resources(cfg: ProbeConfig, hosts: HostSelection) -> dict[str, list[int]] | None:
    """The resources bench probe covers; None for this node alone. Under srun the allocation is the hostfile."""
    if cfg.local and hosts.hostfile:
        raise BadInput("--local: cannot be combined with --hostfile (it probes this node only)")
    if cfg.launcher == "slurm" and not hosts.hostfile:
        return hosts.resources(local_hosts=slurm_hosts())
    resources = hosts.resources()
    if cfg.launcher == "local" and resources is not None and len(resources) > 1:
        raise BadInput(f"--launcher local: the hostfile selects {len(resources)} hosts; use pdsh, openmpi or slurm")
    return resources
