"""The intra-node check: each node's all-reduce over its own GPUs, every node at once; it opens the link launch."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


def _plan(p) -> None:
    launches.links_launch(p, "intra-node")


CHECK = Check(
    name="intra-node",
    levels=("quick", "full", "prolog"),
    launch=launches.LINKS,
    runs="bench.validate.links:intra_node",
    plan=_plan,
    action="drain: the node's GPUs reach each other slower than its peers'; check NVLink/PCIe (health rows)",
    what=("each node's all-reduce over its own GPUs, every node at once (again once, each node keeping its "
          'faster look, where one did not PASS)'),
    judged=('the published busbw of its interconnect (NVSwitch, NVLink, PCIe generation), else its peers; the '
            'floor'))
