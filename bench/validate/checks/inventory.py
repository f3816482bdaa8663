"""The inventory check: each node's GPUs and links (bench probe, whose process also reads the node's health)."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, EVERY_LEVEL


def _plan(p) -> None:
    from bench.cluster.preflight import inventory_wait_s

    p.stages.append({"stage": "inventory", "launches": 0, "timeout_s": p.reach_timeout(inventory_wait_s(p.via)),
                     "predicted_s": round(p.reach + p.c["node_probe_s"], 1),
                     "how": "bench probe on every node at once" + (", reading its health" if p.wanted("health")
                                                                   else "")})


CHECK = Check(
    name="inventory",
    levels=EVERY_LEVEL,
    launch=launches.HEAD,
    runs="bench.validate.nodes:inventory",
    skip=(("", "nodes"), ("heterogeneity", "cluster")),
    always=True,
    plan=_plan,
    action="drain: fix what the inventory names (GPU count, driver, the GPU model against its peers)",
    what=("every node's GPUs and links (`bench probe`), the heterogeneity verdict"),
    judged=("the gate's rules"))
