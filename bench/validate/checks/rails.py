"""The rails check: each NIC on its own: the pair rounds once per rail."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


def _plan(p) -> None:
    rails = p.rails
    if rails:  # one launch per rail (bench.validate.rails), the level's first rounds of pairs each
        p.stages.append({"stage": "rails", "launches": len(rails[0]), "looks": len(rails[0]), "second_looks": 0,
                         "timeout_s": p.timeout, "predicted_s": round(p.rail_s * len(rails[0]), 1),
                         "rounds": len(p.rounds) * p.cfg.repeats,
                         "how": f"{len(rails[0])} rail(s), each alone in a launch of {len(p.rounds)} round(s) of node "
                                f"pairs: {rails[1]}"})


CHECK = Check(
    name="rails",
    launch=launches.OWN,
    skip=(),
    plan=_plan,
    actions=("drain the node, the rail named",),
    what=('each NIC on its own (`--rails mlx5_0,...`, else the Active InfiniBand/RoCE HCAs every node has): the'
          " level's pair rounds once per rail, one launch each, every rank confined to that one device (below);"
          ' a row per node and rail. SKIP with one rail or none'),
    judged=("the same rail of the other nodes (each node's best pair on it), the floor; a FAIL drains the node "
            'with the rail named; a node whose NCCL sent elsewhere is an ERROR'))
