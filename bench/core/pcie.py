"""A PCI device's link to its host as sysfs gives it: the lesser of every link on its way up, maximum and now.

    link("0000:19:00.0")   # {"gen": 5, "width": 16, "speed_gts": 32.0, "gen_now": 4, "width_now": 8, ...}

A GPU's copies to its host cross every link between it and its root port: its
own to the port above it (a PCIe switch's downstream port, or the root
port), and the switch's own uplink where there is one. A Gen5 GPU in a Gen4
slot, or behind a switch whose uplink runs x8, copies at Gen4 or x8 whatever
the GPU's own files say. So each of max_link_speed, max_link_width (what the
link can run at) and current_link_speed, current_link_width (what it trained
to) is the least over the device and every PCI device above it in its sysfs
path (/sys/bus/pci/devices/<bus> links to /sys/devices/pci0000:00/.../<bus>).
A device without a file (a host bridge, a file the kernel does not give)
adds nothing. A GPU lowers its link's speed when idle (the vendor's tool shows
"PCIe Generation Current" 1 at idle), so the speed now is read right after
the copies, and judging goes by the maximum; the width now shows a link
trained narrower than it can run (a riser, a bad seat). Speeds are the
kernel's strings ("16.0 GT/s PCIe"; "8 GT/s" before kernel 5.6), generations
by the rate per lane (PCI-SIG: 2.5, 5, 8, 16, 32, 64 GT/s for gen 1-6).
Shared by the inventory (bench.cluster.interconnect) and the ranks
(bench.worker.binding); pure file reads, no tool.
"""

from __future__ import annotations

import os
import re

GTS_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def read_text(path: str) -> str | None:
    """A sysfs file's text, stripped; None where it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _speed(text: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m and float(m.group(1)) > 0 else None


def _width(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and int(text) > 0 else None


def sysfs_name(bus_id: str | None) -> str | None:
    """The driver's 00000000:18:00.0 (or torch's 0000:18:00.0) as sysfs names it: 0000:18:00.0; None if not an address."""
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])$", (bus_id or "").strip())
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}" if m else None


def path_up(bus_id: str | None, root: str = "/sys") -> list[str]:
    """The device's sysfs folder and every PCI device's above it, the device first; [] where sysfs has none."""
    name = sysfs_name(bus_id)
    if name is None:
        return []
    d = os.path.realpath(os.path.join(root, "bus", "pci", "devices", name))
    out = []
    while _ADDRESS.match(os.path.basename(d)) and os.path.isdir(d):
        out.append(d)
        d = os.path.dirname(d)
    return out


def _least(values: list) -> float | int | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def link(bus_id: str | None, root: str = "/sys") -> dict:
    """{"gen", "width", "speed_gts"} (the most the way up can run at) and {"gen_now", "width_now", "speed_now_gts"}
    (what it trained to), each the least over the device and the PCI devices above it, None where no device gave
    it; "path": the PCI addresses read, the device first."""
    up = path_up(bus_id, root)
    speed = _least([_speed(read_text(os.path.join(d, "max_link_speed"))) for d in up])
    width = _least([_width(read_text(os.path.join(d, "max_link_width"))) for d in up])
    speed_now = _least([_speed(read_text(os.path.join(d, "current_link_speed"))) for d in up])
    width_now = _least([_width(read_text(os.path.join(d, "current_link_width"))) for d in up])
    return {"gen": GTS_GEN.get(speed) if speed else None, "width": width, "speed_gts": speed,
            "gen_now": GTS_GEN.get(speed_now) if speed_now else None, "width_now": width_now,
            "speed_now_gts": speed_now, "path": [os.path.basename(d) for d in up]}
