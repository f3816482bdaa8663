"""The health check: each node's own counters and kernel log: Xid, row remaps, ECC, throttling, PCIe, NVLink,
InfiniBand."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, Row, EVERY_LEVEL, NODES


def _plan(p) -> None:
    p.none("health", "read by the inventory's probe")


CHECK = Check(
    name="health",
    levels=EVERY_LEVEL,
    launch=launches.INVENTORY,
    runs="bench.validate.health:health",
    skip=NODES,
    plan=_plan,
    actions=("the finding's action in bench/data/health_actions.json",),
    action="drain: see the finding",
    row=Row(
        what=("each node's own counters and kernel log, read by the inventory's own process (below)"),
        judged=('bench/data/health_actions.json: a meaning, severity and action per finding, with its source')),)
