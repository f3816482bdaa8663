"""NVLink health: inactive links of a GPU that has NVLink, and non-zero link error counters.

    from bench.cluster.accel.nvidia.nvlink import status_findings, link_findings
    status_findings(open("nvidia-smi-nvlink.txt").read())   # from `nvidia-smi nvlink -s`
    link_findings(0, "00000000:07:00.0", [{"link": 0, "active": False, "errors": {}}], "nvml")

`nvidia-smi nvlink -s` is read with bench.cluster.accel.nvidia.topo.parse_nvlink_status
("<inactive>" is a link at None); "NVML: Unable to retrieve NVLink information as
all links are inActive" under a GPU says every link of it is down. A GPU is
judged when some of its links are inactive while others are active, or when all
are: nvlink-down. A GPU listed with no links has no NVLink and is not judged.
Error counters (replay, recovery, CRC) come from NVML only: no real recorded
`nvidia-smi nvlink -e` output with non-zero counters was found to test a parser on.
"""

from __future__ import annotations

import re

from bench.cluster.findings import finding
from bench.cluster.accel.nvidia.topo import parse_nvlink_status

SOURCE = "nvidia-smi nvlink"


def parse_status(text: str) -> dict[int, dict]:
    """{gpu index: {"active": [links], "inactive": [links], "all_inactive": bool}} of `nvidia-smi nvlink -s`."""
    out = {gpu: {"active": [l["link"] for l in links if l["gbps"] is not None],
                 "inactive": [l["link"] for l in links if l["gbps"] is None], "all_inactive": False}
           for gpu, links in parse_nvlink_status(text).items()}  # fmt: skip
    gpu = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): ", line)
        if m:
            gpu = int(m.group(1))
        elif gpu is not None and re.search(r"all links are inactive", line, re.I):
            out[gpu]["all_inactive"] = True
    return out


def _judge(index: int | None, bus: str | None, active: list[int], inactive: list[int], all_inactive: bool,
           source: str) -> list[dict]:  # fmt: skip
    if all_inactive and not active:
        what = f"GPU {index}: every NVLink link is inactive" + (f" (links {_links(inactive)})" if inactive else
                                                                 " (NVML: all links are inActive)")  # fmt: skip
    elif inactive and active:
        what = f"GPU {index}: NVLink link(s) {_links(inactive)} inactive while {_links(active)} are active"
    else:
        return []
    return [finding("nvlink-down", source, what, gpu_index=index, bus_id=bus)]


def _links(ns: list[int]) -> str:
    return ", ".join(str(n) for n in ns)


def status_findings(text: str, source: str = SOURCE) -> list[dict]:
    return [f for gpu, s in parse_status(text).items()
            for f in _judge(gpu, None, s["active"], s["inactive"], s["all_inactive"], source)]  # fmt: skip


def link_findings(index: int | None, bus: str | None, links: list[dict], source: str) -> list[dict]:
    """NVML's links of one GPU ([{"link", "active", "errors": {name: count}}]) as findings."""
    active = [l["link"] for l in links if l["active"]]
    inactive = [l["link"] for l in links if not l["active"]]
    out = _judge(index, bus, active, inactive, bool(links) and not active, source)
    errs = {f"link {l['link']} {k}": v for l in links for k, v in l.get("errors", {}).items() if v}
    if errs:
        out.append(finding("nvlink-errors", source, f"GPU {index}: NVLink error counters " +
                           ", ".join(f"{k} {v}" for k, v in errs.items()), gpu_index=index, bus_id=bus))  # fmt: skip
    return out
