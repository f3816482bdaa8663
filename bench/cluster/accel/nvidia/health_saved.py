"""A saved report folder's NVIDIA files: nvidia-smi-q.txt, nvidia-smi.txt, nvidia-smi-nvlink.txt (`nvidia-smi nvlink -s`),
gpud-fabric.txt and nvidia-imex-ctl.txt (fabric_saved).

    from bench.cluster.accel.nvidia.health_saved import read, FILES, GPU_FILES
    read(report, folder, present, read_text)     # into a bench.cluster.health Report, in FILES' order

read_text is bench.cluster.health.saved's reader (its size cap, binary and
UTF-8 checks, one-line errors): a file that is not what its name says is
BadInput naming it. Moved here from bench.cluster.health.saved, unchanged.
"""

from __future__ import annotations

import os
from typing import Callable

from bench.cluster.accel.nvidia import nvlink, smi_status
from bench.cluster.accel.nvidia.gpu_state import gpu_findings
from bench.cluster.accel.nvidia.smi import parse_nvidia_smi_table, smi_failure
from bench.cluster.accel.nvidia.smi_query import parse as parse_q
from bench.cluster.accel.nvidia import fabric_state
from bench.cluster.accel.nvidia.fabric_saved import gpud, imex_ctl
from bench.cluster.findings import bus_key
from bench.core.errors import BadInput

FILES = ("nvidia-smi-q.txt", "nvidia-smi.txt", "nvidia-smi-nvlink.txt", "gpud-fabric.txt", "nvidia-imex-ctl.txt")
GPU_FILES = FILES[:2]   # those that list the GPUs (the "gpu" source)


def read(r, folder: str, present: set[str], read_text: Callable[[str], str]) -> None:
    """Each of FILES that is in `present`, in that order."""
    for name, reader in zip(FILES, (_smi_q, _smi, _nvlink, gpud, imex_ctl)):
        if name in present:
            reader(r, os.path.join(folder, name), read_text)


def _smi_q(r, path: str, read_text: Callable[[str], str]) -> None:
    text = read_text(path)
    if smi_failure(text) or smi_status.findings(text, "nvidia-smi -q"):
        r.add(smi_status.findings(text, "nvidia-smi -q"))
        r.not_read("nvidia-smi -q", f"{os.path.basename(path)} holds nvidia-smi's failure, not GPU readings", True)
        return
    gpus = parse_q(text)
    if not gpus:
        raise BadInput(f"{path}: no 'GPU <bus id>' block: not `nvidia-smi -q` output")
    r.gpus = [g.as_gpu() for g in gpus]
    r.links = {bus_key(g.bus_id): g for g in gpus}
    for g in gpus:
        r.add(gpu_findings(g, "nvidia-smi -q"))
    r.read_ok("nvidia-smi -q", f"{len(gpus)} GPU(s) from {os.path.basename(path)}")
    fabric_state.to_report(r, fabric_state.from_smi_q(text), "nvidia-smi -q")  # NVLink fabric: state, domain


def _smi(r, path: str, read_text: Callable[[str], str]) -> None:
    text = read_text(path)
    found = smi_status.findings(text)
    table = parse_nvidia_smi_table(text)
    if not found and table["error"]:
        raise BadInput(f"{path}: {table['error']}")
    r.add(found)
    if not r.gpus and table["gpus"]:
        r.gpus = [{"index": g["index"], "bus_id": g["pci_bus_id"], "name": g["name"]} for g in table["gpus"]]
    r.read_ok("nvidia-smi", f"{len(table['gpus'])} GPU row(s), {len(found)} failure(s) from {os.path.basename(path)}")


def _nvlink(r, path: str, read_text: Callable[[str], str]) -> None:
    text = read_text(path)
    if not nvlink.parse_status(text):
        raise BadInput(f"{path}: no 'GPU N:' line: not `nvidia-smi nvlink -s` output")
    r.add(nvlink.status_findings(text))
    r.read_ok("nvidia-smi nvlink", f"{len(nvlink.parse_status(text))} GPU(s) from {os.path.basename(path)}")
