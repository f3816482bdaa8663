"""The health check: each node's own counters and kernel log: Xid, row remaps, ECC, throttling, PCIe, NVLink,
InfiniBand."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, EVERY_LEVEL


CHECK = Check(
    name="health",
    levels=EVERY_LEVEL,
    launch=launches.INVENTORY,
    plan="read by the inventory's probe",
    actions=("the finding's action in bench/data/health_actions.json",),
    action="drain: see the finding",
    what=("each node's own counters and kernel log, read by the inventory's own process (below)"),
    judged=('bench/data/health_actions.json: a meaning, severity and action per finding, with its source'))
