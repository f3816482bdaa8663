"""This node's NVIDIA GPUs' health, read now: NVML, else `nvidia-smi -q` and `nvidia-smi nvlink -s`.

    from bench.cluster.accel.nvidia.health_live import read
    read(report, root="/sys")        # gpus, findings, read/not_read into a bench.cluster.health Report

A node with no NVIDIA GPU on its PCI bus, no NVML and no nvidia-smi is a
CPU node: the GPU part is not_read with expected=False. Moved here from
bench.cluster.health.live, unchanged; `root` (/sys) can be a copy in a test.
"""

from __future__ import annotations

import os

from bench.cluster.accel.nvidia import nvlink, nvml, smi_status
from bench.cluster.accel.nvidia.gpu_state import gpu_findings
from bench.cluster.accel.nvidia.smi import run_smi
from bench.cluster.accel.nvidia.smi_query import parse as parse_q
from bench.cluster.accel.nvidia import fabric_state
from bench.cluster.findings import finding


def _nvidia_on_pci(root: str) -> int:
    """NVIDIA display/3D controllers on the PCI bus (vendor 0x10de, class 0x03xxxx; NVSwitches are bridges)."""
    base = os.path.join(root, "bus", "pci", "devices")
    n = 0
    for dev in os.listdir(base) if os.path.isdir(base) else ():
        try:
            with open(os.path.join(base, dev, "vendor")) as v, open(os.path.join(base, dev, "class")) as c:
                n += v.read().strip() == "0x10de" and c.read().strip().startswith("0x03")
        except OSError:
            continue
    return n


def _gpus_nvml(r, got: nvml.NvmlRead) -> None:
    r.gpus = [g.as_gpu() for g in got.gpus]
    for g in got.gpus:
        r.add(gpu_findings(g, "nvml") + nvlink.link_findings(g.index, g.bus_id, g.nvlinks, "nvml"))
        for reading, why in g.unreadable.items():
            r.not_read("nvml", f"GPU {g.index} {reading}: {why}", True)
    for index, why in got.lost:
        r.add([finding("gpu-unreachable", "nvml", f"GPU {index}: NVML cannot open it ({why})", gpu_index=index)])
    if got.reason:
        r.not_read("nvml", got.reason, True)
    r.read_ok("nvml", f"{len(got.gpus)} GPU(s), driver {got.driver}")
    fabric_state.to_report(r, [g.fabric for g in got.gpus if g.fabric is not None], "nvml")  # NVLink fabric


def _gpus_smi(r, got: nvml.NvmlRead, on_pci: int) -> None:
    a = run_smi(["-q"])
    if a.missing:
        if on_pci:
            r.not_read("gpu", f"{on_pci} NVIDIA GPU(s) on the PCI bus but no NVML ({got.reason}) and no nvidia-smi", True)
        else:
            r.not_read("gpu", "no GPU on this node (no NVIDIA GPU on the PCI bus, no NVML, no nvidia-smi)", False)
        return
    if got.reason and not got.no_driver:  # NVML is there and failed; a working NVML that lists no GPU is not a fault
        r.not_read("nvml", got.reason, True)
    if a.failure:
        found = smi_status.findings(a.stdout + "\n" + a.stderr)
        r.add(found)
        if not found:
            r.not_read("nvidia-smi -q", a.failure, True)
        return
    gpus = parse_q(a.stdout)
    if not gpus:
        if on_pci:
            said = f"nvidia-smi -q lists no GPU while {on_pci} NVIDIA GPU(s) are on the PCI bus"
            r.add(smi_status.findings(a.stdout) or [finding("no-gpu-found", "nvidia-smi -q", said)])
        else:
            r.not_read("gpu", "no GPU on this node (nvidia-smi -q lists none, none on the PCI bus)", False)
        return
    r.gpus = [g.as_gpu() for g in gpus]
    for g in gpus:
        r.add(gpu_findings(g, "nvidia-smi -q"))
    r.read_ok("nvidia-smi -q", f"{len(gpus)} GPU(s)")
    fabric_state.to_report(r, fabric_state.from_smi_q(a.stdout), "nvidia-smi -q")  # NVLink fabric: state, domain
    links = run_smi(["nvlink", "-s"])
    if links.failure is None:
        r.add(nvlink.status_findings(links.stdout))
        r.read_ok("nvidia-smi nvlink", f"{len(nvlink.parse_status(links.stdout))} GPU(s)")
    else:
        r.not_read("nvidia-smi nvlink", links.failure, True)


def read(r, root: str = "/sys") -> None:
    """This node's NVIDIA GPUs into the health report `r`: NVML, else nvidia-smi -q (and nvlink -s)."""
    got = nvml.read()
    if got.gpus is not None and (got.gpus or got.lost):
        _gpus_nvml(r, got)
    else:
        _gpus_smi(r, got, _nvidia_on_pci(root))
