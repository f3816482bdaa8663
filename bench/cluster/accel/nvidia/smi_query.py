"""`nvidia-smi -q` read for health: each GPU's remapped rows, retired pages, ECC, clocks reasons, PCIe, reset, fabric.

    from bench.cluster.accel.nvidia.smi_query import parse
    gpus = parse(open("nvidia-smi-q.txt").read())     # [GpuHealth], in listed order (index = position)
    gpus[0].remap_pending, gpus[0].pcie_width          # (True, 16) for the A10 of the fixtures

Read as nvidia-smi prints it: a "GPU 00000000:07:00.0" line opens a GPU, then
"Key : Value" lines indented by 4 spaces per level. Both names of the clocks
section ("Clocks Event Reasons", drivers from 535; "Clocks Throttle Reasons"
before), both ECC layouts (DRAM/SRAM Uncorrectable, with Hopper's "SRAM
Uncorrectable Parity" and "SEC-DED" split, and the older "Double Bit" /
"Total"), "Pending Page Blacklist" (older name of the retired-pages flag) and
the GPU Reset Status and Fabric blocks where the driver prints them. N/A and
missing readings are None. The findings come from gpu_state.gpu_findings.
"""

from __future__ import annotations

import re

from bench.cluster.accel.nvidia.gpu_state import GpuHealth
from bench.cluster.accel.nvidia.smi import smi_failure

_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_NA = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]"}
# "Clocks Event Reasons" keys -> the reason names gpu_state uses (NVML's bits, lower case).
_REASONS = {"idle": "idle", "applications clocks setting": "app_clocks", "sw power cap": "sw_power_cap",
            "hw slowdown": "hw_slowdown", "hw thermal slowdown": "hw_thermal",
            "hw power brake slowdown": "hw_power_brake", "sync boost": "sync_boost",
            "sw thermal slowdown": "sw_thermal", "display clock setting": "display_clock"}  # fmt: skip


def _blocks(text: str) -> list[tuple[str | None, dict[tuple[str, ...], str]]]:
    """[(bus id, {("Remapped Rows", "Pending"): "Yes", ...})] per GPU, keys as paths of the indented sections."""
    out: list[tuple[str, dict]] = []
    stack: list[str] = []
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            out.append((m.group(1), {}))
            stack = []
            continue
        level = (len(line) - len(line.lstrip(" "))) // 4 - 1
        if not line.strip() or level < 0:
            continue
        if not out:  # an excerpt of one GPU's sections, without its "GPU <bus>" line
            out.append((None, {}))
        key, _, value = (part.strip() for part in line.partition(":"))
        stack[level:] = [key]
        out[-1][1][tuple(stack)] = value
    return out


def _val(d: dict, *path: str) -> str | None:
    v = d.get(path)
    return None if v is None or v.strip().lower() in _NA else v.strip()


def _int(v: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", v or "")
    return int(m.group(1)) if m else None


def _yes(v: str | None) -> bool | None:
    return None if v is None else v.strip().lower() in ("yes", "active", "true")


def _ecc(d: dict, scope: str) -> tuple[int | None, str]:
    """Uncorrectable ECC errors of one scope ("Volatile" or "Aggregate"): (total, "SRAM 1, DRAM 0")."""
    parts: dict[str, int] = {}
    for path, value in d.items():
        if len(path) >= 3 and path[0] == "ECC Errors" and path[1] == scope:
            name = " ".join(path[2:])
            n = _int(_val(d, *path))
            if n is None:
                continue
            if "Uncorrectable" in name and "Threshold" not in name:
                kind = name.split()[0]                     # "SRAM" (Parity and SEC-DED summed), "DRAM"
                parts[kind] = parts.get(kind, 0) + n
            elif path[2:] == ("Double Bit", "Total"):      # the layout before A100
                parts["double bit"] = n
    if not parts:
        return None, ""
    return sum(parts.values()), ", ".join(f"{k} {v}" for k, v in parts.items())


def _gpu(index: int, bus: str | None, d: dict) -> GpuHealth:
    g = GpuHealth(index=index, bus_id=bus, name=_val(d, "Product Name"))
    g.remap_correctable = _int(_val(d, "Remapped Rows", "Correctable Error"))
    g.remap_uncorrectable = _int(_val(d, "Remapped Rows", "Uncorrectable Error"))
    g.remap_pending = _yes(_val(d, "Remapped Rows", "Pending"))
    g.remap_failed = _yes(_val(d, "Remapped Rows", "Remapping Failure Occurred"))
    g.retired_pending = _yes(_val(d, "Retired Pages", "Pending Page Blacklist") or _val(d, "Retired Pages", "Pending"))
    g.ecc_volatile_uncorrectable, vol = _ecc(d, "Volatile")
    g.ecc_aggregate_uncorrectable, agg = _ecc(d, "Aggregate")
    g.ecc_detail = "; ".join(f"{scope} {s}" for scope, s in (("volatile", vol), ("aggregate", agg)) if s)
    section = next((p[0] for p in d if p[0] in ("Clocks Event Reasons", "Clocks Throttle Reasons")), None)
    if section:
        named = {p[-1].lower(): v for p, v in d.items() if p[0] == section and len(p) > 1}
        g.reasons = frozenset(_REASONS[k] for k, v in named.items() if k in _REASONS and v == "Active")
    g.pstate = _val(d, "Performance State")
    link = ("PCI", "GPU Link Info")
    g.pcie_gen, g.pcie_gen_max = (_int(_val(d, *link, "PCIe Generation", k)) for k in ("Current", "Max"))
    g.pcie_width, g.pcie_width_max = (_int(_val(d, *link, "Link Width", k)) for k in ("Current", "Max"))
    g.reset_required = _yes(_val(d, "GPU Reset Status", "Reset Required"))
    g.drain_and_reset = _yes(_val(d, "GPU Reset Status", "Drain and Reset Recommended"))
    g.fabric_state, g.fabric_status = _val(d, "Fabric", "State"), _val(d, "Fabric", "Status")
    return g


def parse(text: str) -> list[GpuHealth]:
    """Every GPU block of `nvidia-smi -q`; [] when the text has none (a failure message, another tool's output).

    An excerpt of one GPU's sections without its "GPU <bus>" line is one GPU whose bus id is None.
    """
    if smi_failure(text):
        return []
    return [_gpu(i, bus, d) for i, (bus, d) in enumerate(_blocks(text))]
