"""The NVIDIA GPUs' links as nvidia-smi prints them: `nvidia-smi topo -m` (the matrix) and `nvidia-smi nvlink -s`.

    from bench.cluster.accel.nvidia.topo import parse_topo_matrix, parse_nvlink_status
    parse_topo_matrix(text)["links"]["GPU0"]["GPU1"]     # "NV18", "PIX", "SYS", ...
    parse_nvlink_status(text)[0]                         # [{"link": 0, "gbps": 25.0}, ...]

Pure parsers, tested on recorded outputs (tests/fixtures/gpu); the backend
(bench.cluster.accel.nvidia) runs the commands, bench.cluster.interconnect
and linkkind read the results as kinds.
"""

from __future__ import annotations

import re

from bench.cluster.accel.nvidia.smi import run_smi

# nvidia-smi separates the matrix's cells with tabs; copies pasted into issues often have runs of spaces instead.
_CELL = re.compile(r"\t| {2,}")
_MATRIX_TAIL = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def parse_topo_matrix(text: str) -> dict:
    """`nvidia-smi topo -m` -> {"devices", "links": {dev: {peer: "NV18"|"PIX"|...}}, "nics", "error"}.

    nics maps each non-GPU device to its name from the NIC Legend ("NIC0": "mlx5_0"); older drivers
    name the column after the device itself ("mlx5_0"), which is then its own name.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln[:1] in ("\t", " ") and _cells(ln)[:1] == ["GPU0"]), None)
    if start is None:
        return {"devices": [], "links": {}, "nics": {}, "error": "not nvidia-smi topo -m output (no GPU0 header)"}
    devices = []
    for cell in _cells(lines[start]):
        if cell in _MATRIX_TAIL:
            break
        devices.append(cell)
    links: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        cells = _cells(line)
        if not cells or cells[0] not in devices:
            break
        links[cells[0]] = {d: v for d, v in zip(devices, cells[1 : 1 + len(devices)]) if d != cells[0]}
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M))
    nics = {d: legend.get(d, None if d.startswith("NIC") else d) for d in devices if not d.startswith("GPU")}
    return {"devices": devices, "links": links, "nics": nics, "error": None}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _CELL.split(line.strip())] if line.strip() else []


def parse_nvlink_status(text: str) -> dict[int, list[dict]]:
    """`nvidia-smi nvlink -s` -> {gpu index: [{"link": n, "gbps": GB/s per direction as printed, or None}]}.

    "gbps" is nvidia-smi's own unit, gigabytes per second ("25 GB/s", "25.781 GB/s"); an inactive
    link ("<inactive>", "Inactive") is None. A GPU without NVLink is listed with no links.
    """
    out: dict[int, list[dict]] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): ", line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = []
            continue
        m = re.match(r"^\s+Link (\d+): (.*)$", line)
        if m and gpu is not None:
            rate = re.match(r"([\d.]+)\s*GB/s", m.group(2).strip())
            out[gpu].append({"link": int(m.group(1)), "gbps": float(rate.group(1)) if rate else None})
    return out


def read_links(timeout: float) -> tuple[dict | None, dict[int, list[dict]] | None, dict[str, str]]:
    """(`nvidia-smi topo -m` parsed or None, `nvidia-smi nvlink -s` parsed or None, {"topo"|"nvlink": why})."""
    errors: dict[str, str] = {}
    a = run_smi(["topo", "-m"], timeout=timeout)
    topo = parse_topo_matrix(a.stdout) if a.failure is None else None
    if a.failure is not None or (topo and topo["error"]):
        errors["topo"] = a.failure or topo["error"]
    a = run_smi(["nvlink", "-s"], timeout=timeout)
    nvlink = parse_nvlink_status(a.stdout) if a.failure is None else None
    if a.failure is not None:
        errors["nvlink"] = a.failure
    return topo, nvlink, errors
