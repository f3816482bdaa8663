"""One finding of a node's health check, its meaning from one table, and the helpers every source shares.

    from bench.cluster.findings import finding, worst, gpu_index_for_bus, bus_key
    f = finding("xid-79", "kernel-log", "Xid 79 at 16:24:18: GPU has fallen off the bus.", bus_id="0000:02:00")
    f["severity"], f["action"]          # ('fail', 'reboot'), from bench/data/health_actions.json
    worst({"findings": [f]})            # 'fail'
    gpu_index_for_bus([{"index": 3, "bus_id": "00000000:9B:00.0"}], "9b:00.0")   # 3

The table (bench/data/health_actions.json) holds per code: a one-line meaning,
a severity (fail: drain the node; warn: degraded or to watch; info: seen,
not a fault), an action from a fixed set and the source of both. A code the
table lacks is a programming error (KeyError), except Xids: an Xid number
the table does not list is reported as "xid-unknown" with its number.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

SEVERITY_ORDER = ("info", "warn", "fail")
ACTIONS = ("drain", "reset-gpu", "reseat", "replace-gpu", "reboot", "check-fabric", "free-space", "restart-app",
           "watch")  # fmt: skip
FIELDS = ("code", "source", "severity", "action", "meaning", "what", "gpu_index", "bus_id", "port", "count",
          "first_seen", "last_seen", "reference")  # fmt: skip

# A GPU's PCI address comes in three spellings: the kernel's Xid lines "0000:9b:00" (no function),
# the driver's library and tool "00000000:9B:00.0" (8-digit domain, upper case) and short "9b:00.0" (no domain).
_BUS = re.compile(r"^(?:PCI:)?(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.[0-7])?$")


@functools.cache
def table() -> dict:
    """The whole table: {"codes": {code: {"meaning", "severity", "action", "source"}}, "severities", "actions"}."""
    return json.loads(resources.files("bench").joinpath("data/health_actions.json").read_text("utf-8"))


def entry(code: str) -> dict:
    return table()["codes"][code]


def xid_code(number: int) -> str:
    """The table's code for an Xid number: "xid-79", or "xid-unknown" where the table has no line for it."""
    return f"xid-{number}" if f"xid-{number}" in table()["codes"] else "xid-unknown"


def bus_key(bus: str | None) -> str | None:
    """One spelling for a PCI address, "0000:9b:00.0" (sysfs's), whatever form it came in; None if not one."""
    m = _BUS.match((bus or "").strip())
    if not m:
        return None
    return f"{int(m.group('dom') or '0', 16):04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.0"


def gpu_index_for_bus(gpus: list[dict], bus: str | None) -> int | None:
    """The index of the GPU at `bus` in a report's gpus list ([{"index", "bus_id"}]), None where none matches."""
    key = bus_key(bus)
    if key is None:
        return None
    return next((g.get("index") for g in gpus if bus_key(g.get("bus_id")) == key), None)


def finding(code: str, source: str, what: str, *, bus_id: str | None = None, gpu_index: int | None = None,
            port: str | None = None, count: int | None = None, first_seen: str | None = None,
            last_seen: str | None = None) -> dict:  # fmt: skip
    """A finding as the report holds it: the code's meaning, severity and action from the table, `what` was read."""
    e = entry(code)
    return {"code": code, "source": source, "severity": e["severity"], "action": e["action"], "meaning": e["meaning"],
            "what": " ".join(what.split()), "gpu_index": gpu_index, "bus_id": bus_key(bus_id) or bus_id,
            "port": port, "count": count, "first_seen": first_seen, "last_seen": last_seen,
            "reference": e["source"]}  # fmt: skip


def worst(report: dict) -> str:
    """The worst severity among a report's findings: "fail", "warn", "info", or "ok" when there is none."""
    seen = [f["severity"] for f in report.get("findings", ())]
    return max(seen, key=SEVERITY_ORDER.index) if seen else "ok"


def attach_gpus(findings: list[dict], gpus: list[dict]) -> list[dict]:
    """Fill each finding's GPU index from its bus id, and its bus id from its index, with the report's GPUs."""
    by_index = {g.get("index"): g.get("bus_id") for g in gpus}
    for f in findings:
        if f["gpu_index"] is None and f["bus_id"]:
            f["gpu_index"] = gpu_index_for_bus(gpus, f["bus_id"])
        if f["bus_id"] is None and f["gpu_index"] is not None and by_index.get(f["gpu_index"]):
            f["bus_id"] = bus_key(by_index[f["gpu_index"]])
    return findings


def sort_key(f: dict) -> tuple:
    """Worst first, then by GPU, then as read."""
    return (-SEVERITY_ORDER.index(f["severity"]), f["gpu_index"] if f["gpu_index"] is not None else 1 << 30)
