"""One node's inventory: CPU, memory, network, library versions and GPUs.

    python -m bench probe --local --json        # what a remote probe runs

    from bench.cluster.probe import local_inventory, parse_nvidia_smi_table
    inv = local_inventory()                      # JSON-serialisable dict
    parse_nvidia_smi_table(open("smi.txt").read())["gpus"]

GPUs come from the accelerator backend (bench.cluster.accel.inventory: the
vendor's library, else its tool's query), else none, with the reason in `gpu_error`. torch is asked (in a subprocess: bench.worker.torch_probe)
only when a GPU was found, or when asked, which architectures the installed wheel was built for;
a node whose GPU is not among them cannot run. The text parsers (bench.cluster.accel.nvidia.smi,
re-exported here) are pure so that recorded outputs (tests/fixtures/gpu)
test them, and node_inventory() assembles an inventory from their results
the same way for this node and for recorded ones.

inv["interconnect"] says how the GPUs reach each other and the node reaches
the others (bench.cluster.interconnect.collect): it asks the GPUs' backend for
their links (GPU nodes only) and runs `ibstat` (where installed),
each with a 10 s deadline, and reads /sys/class/infiniband/*/ports/*,
/sys/class/net/* and the GPUs' PCIe links under /sys/bus/pci/devices. It
gives {"raw", "intra", "inter", "errors"}: intra.kind nvswitch, nvlink, pcie,
shared-memory (no GPU), none (one GPU) or unknown; inter.kind infiniband,
roce, ethernet, virtual (veth, bridge, lo) or unknown, with the rate and the
evidence; a tool that is missing or fails is a reason in "errors".
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys

import bench
from bench.core.gpus import lookup, parse_cc
from bench.cluster import accel
from bench.cluster.interconnect import collect as collect_interconnect
from bench.cluster.accel.nvidia.smi import (
    QUERY_FIELDS,
    parse_nvidia_smi_q,
    parse_nvidia_smi_table,
    parse_query_csv,
    smi_failure,
)
from bench.cluster.task_gpus import task_of

# The parsers live in bench.cluster.accel.nvidia.smi and are re-exported: the probe's text interface.
__all__ = ["QUERY_FIELDS", "complete_gpus", "find_arch_lists", "local_inventory", "node_inventory",
           "parse_nvidia_smi_q", "parse_nvidia_smi_table", "parse_query_csv", "smi_failure",
           "torch_built_for", "torch_info"]  # fmt: skip

TORCH_PROBE_TIMEOUT_S = 120.0
LIBRARIES = ("torch", "torchvision", "deepspeed", "timm")
IMAGE_ENV = "VITBENCH_IMAGE"
TORCH_TASK_ENV = "VITBENCH_PROBE_TORCH_LOCALID"
# sm_90 (cubin), sm_90a (arch-specific), sm_100f (family), compute_90 (PTX).
_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def find_arch_lists(text: str) -> list[list[str]]:
    """Every torch arch list in text: `['sm_75', 'sm_80']` reprs and the
    "supports CUDA capabilities sm_50 sm_70" sentence of torch's warning."""
    found: list[list[str]] = []
    for m in re.finditer(r"\[(?:\s*'(?:sm|compute)_\w+'\s*,?)+\s*\]", text):
        found.append(list(ast.literal_eval(m.group(0))))
    for m in re.finditer(r"supports CUDA capabilities((?:\s+(?:sm|compute)_\w+)+)", text):
        found.append(m.group(1).split())
    return found


def torch_built_for(cc: str, arch_list: list[str]) -> bool:
    """Whether a torch built for `arch_list` has kernels for a GPU of capability `cc`.

    sm_XY (cubin) runs on X.Z for Z >= Y, same major only; sm_XYa only on X.Y
    exactly; sm_XYf on the same major from X.Y up; compute_XY (PTX) is JIT
    compiled for any X.Y or newer, majors included.
    """
    dev = parse_cc(cc)
    if dev is None:
        return False
    for arch in arch_list:
        m = _ARCH.match(arch.strip())
        if not m:
            continue
        kind, digits, suffix = m.groups()
        target = (int(digits[:-1]), int(digits[-1]))
        if kind == "compute":
            ok = dev >= target
        elif suffix == "a":
            ok = dev == target
        else:
            ok = dev[0] == target[0] and dev[1] >= target[1]
        if ok:
            return True
    return False


def complete_gpus(gpus: list[dict], arch_list: list[str] | None) -> list[dict]:
    """Add the table model, a table cc where the driver gave none, and torch_built_for."""
    out = []
    for g in gpus:
        g = dict(g)
        spec = lookup(g["name"], g.get("memory_mib")) if g.get("name") else None
        g["model"] = spec.name if spec else None
        if not g.get("cc") and spec is not None:
            g["cc"], g["cc_source"] = spec.cc, "table"
        g["torch_built_for"] = torch_built_for(g["cc"], arch_list) if g.get("cc") and arch_list else None
        out.append(g)
    return out


def node_inventory(host: str, smi: dict, *, versions: dict | None = None, torch_info: dict | None = None,
                   image: str | None = None, system: dict | None = None) -> dict:  # fmt: skip
    """The inventory of one node from its parts; local_inventory and the tests both build it here."""
    arch_list = (torch_info or {}).get("arch_list")
    inv = {
        "host": host,
        "image": image,
        "versions": {"bench": bench.__version__, **{k: None for k in LIBRARIES}, **(versions or {})},
        "driver_version": smi.get("driver_version"),
        "cuda_driver_version": smi.get("cuda_version"),
        "gpus": complete_gpus(smi.get("gpus", []), arch_list),
        "gpu_source": smi.get("source"),
        "gpu_error": smi.get("error") if not smi.get("gpus") else None,
        "torch": torch_info,
    }
    inv.update(system or {})
    return inv


def torch_info(timeout: float = TORCH_PROBE_TIMEOUT_S) -> dict | None:
    """CUDA runtime, NCCL and arch list of the installed torch, or None where torch is not installed.

    Asked of a fresh interpreter (bench.worker.torch_probe, the only code
    here that may import torch): a torch that crashes on import, or a CUDA
    init that hangs, is a finding of this node, not the end of the probe.
    """
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.worker.torch_probe"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"importing torch took longer than {timeout:g} s"}
    except OSError as e:
        return {"error": f"{sys.executable}: {e.strerror or e}"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (proc.stderr.strip().splitlines() or [f"exited {proc.returncode}, no output"])[-1]
        return {"error": f"torch probe failed: {last[:300]}"}


def library_versions() -> dict[str, str | None]:
    """Installed versions from package metadata: nothing is imported."""
    out: dict[str, str | None] = {"bench": bench.__version__}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                # x86 says "model name"; arm64 kernels say "Model" or nothing useful.
                if key.strip() in ("model name", "Model", "Hardware"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def system_facts() -> dict:
    """Hostname, CPU, RAM, network interfaces and Python of this node."""
    import psutil

    stats = psutil.net_if_stats()
    families = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6", psutil.AF_LINK: "mac"}
    network = []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        st = stats.get(name)
        network.append({
            "name": name,
            "up": st.isup if st else None,
            # psutil reports 0 where the kernel does not know (veth, lo): None, not "0 Mb/s".
            "speed_mbps": (st.speed or None) if st else None,
            "mtu": st.mtu if st else None,
            "addresses": [{"family": families.get(a.family, str(a.family)), "address": a.address,
                           "netmask": a.netmask} for a in addrs],  # fmt: skip
        })  # fmt: skip
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release() or None,
        "cpu": {"model": _cpu_model(), "physical_cores": psutil.cpu_count(logical=False),
                "logical_cores": psutil.cpu_count(logical=True)},  # fmt: skip
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "network": network,
        "python": {"executable": sys.executable, "prefix": sys.prefix, "version": platform.python_version()},
    }


def _torch_task() -> bool:
    """Whether this task asks torch: bench's srun probe runs a task per slot (bench.cluster.probe_launch) and names
    the one per node that does (TORCH_TASK_ENV = its SLURM_LOCALID), sparing a node of 8 GPUs 8 imports at once."""
    want = os.environ.get(TORCH_TASK_ENV)
    return want is None or want == os.environ.get("SLURM_LOCALID")


def local_inventory(with_torch: bool | None = None, health=None) -> dict:
    """This node's inventory. torch is imported when with_torch, or (None) when a GPU was found. health (a
    bench.cluster.inventory.HealthAsk): also the node's health report, read once per node (the task that
    asks torch, under srun's task per slot)."""
    facts = system_facts()
    smi = accel.inventory()
    info = torch_info() if with_torch or (with_torch is None and smi["gpus"] and _torch_task()) else None
    inv = node_inventory(facts["hostname"], smi, versions=library_versions(), torch_info=info,
                         image=os.environ.get(IMAGE_ENV) or None, system=facts)  # fmt: skip
    inv["interconnect"] = collect_interconnect(inv["gpus"], os.environ)
    # The GPUs this process was bound to (srun's per-task binding): bench.cluster.task_gpus merges tasks by it.
    inv["task"] = task_of(os.environ)
    # Whether DCGM's diagnostic can run here: bench validate's dcgm stage reaches only the nodes that have it.
    inv["dcgmi"] = shutil.which("dcgmi")
    if health is not None and _torch_task():
        from bench.cluster.health import collect_live

        inv["health"] = collect_live(since=health.since, folders=health.folders, dcgm_level=health.dcgm_level)
    return inv
