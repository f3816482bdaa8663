"""How a node's AMD GPUs reach each other: amd-smi topology's LINK TYPE table and amd-smi xgmi's link table.

    from bench.cluster.accel.amd.links import link_types, xgmi_table
    link_types(open("amd-smi-topology.txt").read())   # {("0000:0c:00.0", "0000:22:00.0"): "XGMI", ...}
    xgmi_table(open("amd-smi-xgmi.txt").read())       # {"0000:0c:00.0": {"bit_rate_gbps": 32.0, ...}}

A table is a header row of bus ids and one row per GPU, as amd-smi prints
them (columns by position). rocm-smi's JSON gives the same pairs by card
number (bench.cluster.accel.amd.rocm_smi).
"""

from __future__ import annotations

import re

_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _table(text: str, title: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip().upper() == title + ":"), None)
    if start is None:
        return []
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() or line.strip().endswith("TABLE:"):
            break
        rows.append(line.split())
    return rows


def link_types(text: str) -> dict[tuple[str, str], str]:
    """Each ordered pair of GPUs (bus ids) and its link type; a GPU with itself is left out."""
    rows = _table(text, "LINK TYPE TABLE")
    if not rows or not all(_BDF.match(x) for x in rows[0]):
        return {}
    head = rows[0]
    return {(r[0], peer): kind.upper() for r in rows[1:] if r and _BDF.match(r[0])
            for peer, kind in zip(head, r[1:]) if peer != r[0]}  # fmt: skip


def xgmi_table(text: str) -> dict[str, dict]:
    """amd-smi xgmi's LINK METRIC TABLE: per GPU (bus id) its link's bit rate, maximum bandwidth and type."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^GPU(\d+)\s+(\S+)\s+([\d.]+)\s*Gb/s\s+([\d.]+)\s*Gb/s\s+(\S+)", line)
        if m and _BDF.match(m.group(2)):
            out[m.group(2)] = {"gpu": int(m.group(1)), "bit_rate_gbps": float(m.group(3)),
                               "max_bandwidth_gbps": float(m.group(4)), "link_type": m.group(5).upper()}
    return out


def not_xgmi(pairs: dict[tuple, str]) -> list[tuple]:
    """The pairs not on xGMI where some pairs of the same node are: a board wired for xGMI with a link down (an
    all-PCIe node, MI100 cards without a bridge, is not judged)."""
    kinds = set(pairs.values())
    if "XGMI" not in kinds:
        return []
    return sorted({tuple(sorted(p)) for p, k in pairs.items() if k != "XGMI"})
