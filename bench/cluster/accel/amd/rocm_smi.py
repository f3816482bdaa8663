"""rocm-smi's `--json` output (rocm-smi -a or telegraf's argument list): each card's readings and the links.

    from bench.cluster.accel.amd.rocm_smi import parse
    gpus, system = parse(open("rocm-smi.json").read())    # [AmdGpu] by card number, {"driver_version", "links"}

Keys as ROCm 5.7 and 6.0 print them ("Card series", "PCI Bus", "VRAM Total
Memory (B)", "VBIOS version", "<name> firmware version", "PCIe Replay
Count", "pcie clock level": "0 (16.0GT/s x16)"); the system block's
"Driver version" and "(Topology) Link type between DRM devices A and B".
RAS counters appear under `--showrasinfo` as "<block> correctable count"
and "<block> uncorrectable count" where the card has them; the recorded
files were taken without it. Raises ValueError for text that is not such
JSON.
"""

from __future__ import annotations

import json
import re

from bench.cluster.accel.amd.readings import AmdGpu
from bench.cluster.accel.amd.text import number, value
from bench.cluster.findings import bus_key

_LINK = re.compile(r"^\(Topology\) Link type between DRM devices (\d+) and (\d+)$")
_RAS = re.compile(r"^(?P<block>\w+) (?P<kind>correctable|uncorrectable|deferred) (?:error )?count$", re.I)


def _card(index: int, c: dict) -> AmdGpu:
    name = value(c.get("Card series")) or value(c.get("Card SKU"))
    bus = value(c.get("PCI Bus"))
    g = AmdGpu(index=index, bus_id=bus_key(bus) or bus, name=name, board=name,
               device_id=value(c.get("Device ID") or c.get("GPU ID")))  # fmt: skip
    total = number(value(c.get("VRAM Total Memory (B)")))
    g.memory_mib = None if total is None else int(total / 2**20)
    g.firmware = {k[: -len(" firmware version")]: str(v) for k, v in c.items()
                  if k.endswith(" firmware version") and value(str(v))}  # fmt: skip
    if value(c.get("VBIOS version")):
        g.firmware["vbios"] = c["VBIOS version"]
    replay = number(value(c.get("PCIe Replay Count")))
    if replay is not None:
        g.pcie_errors["replay_count"] = int(replay)
    m = re.search(r"([\d.]+)GT/s x(\d+)", str(c.get("pcie clock level", "")))
    if m:
        g.pcie_speed_gts, g.pcie_width = float(m.group(1)), int(m.group(2))
    for k, v in c.items():
        if (r := _RAS.match(k)) and (n := number(value(str(v)))) is not None:
            g.ecc.setdefault(r.group("block").upper(), {})[r.group("kind").lower()] = int(n)
    return g


def parse(text: str) -> tuple[list[AmdGpu], dict]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object of cards")
    cards = sorted((int(k[4:]), v) for k, v in data.items() if re.fullmatch(r"card\d+", k) and isinstance(v, dict))
    system = data.get("system") if isinstance(data.get("system"), dict) else {}
    gpus = [_card(i, c) for i, c in cards]
    driver = value(system.get("Driver version"))
    for g in gpus:
        g.driver_version = driver
    links = {}
    for k, v in system.items():
        if m := _LINK.match(k):
            links[(int(m.group(1)), int(m.group(2)))] = str(v).upper()
    return gpus, {"driver_version": driver, "links": links}
