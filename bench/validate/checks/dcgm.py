"""The dcgm check: DCGM's diagnostic on every node at once, each under its own timeout."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


def _plan(p) -> None:
    from bench.cluster.accel.nvidia.dcgm import DOCUMENTED_S, timeout_for
    from bench.cluster.preflight import inventory_wait_s

    # The level's documented length after every node is reached; a node's dcgmi is killed past its timeout, and
    # the head waits that plus a node's start.
    level = p.cfg.dcgm_level()
    node_timeout = p.cfg.dcgm_timeout if p.cfg.dcgm_timeout is not None else timeout_for(level)
    p.stages.append({
        "stage": "dcgm", "launches": 0, "looks": 1, "second_looks": 0, "level": level,
        "timeout_s": p.reach_timeout(node_timeout + inventory_wait_s(p.via)),
        "predicted_s": round(p.reach + p.c["node_probe_s"] + min(DOCUMENTED_S[level], node_timeout), 1),
        "how": f"dcgmi diag -r {level} on every node that has dcgmi, all at once: about {DOCUMENTED_S[level]:g} s "
               f"by NVIDIA's dcgmi reference; a node still running at {node_timeout:g} s is killed and unknown"})


# --dcgm auto's level at each level: at quick the level that fits its minutes (1: seconds), at full the long
# one (3: about 15 minutes; bench.cluster.accel.nvidia.dcgm.DOCUMENTED_S); none at health.
AUTO = {"prolog": 1, "health": None, "quick": 1, "full": 3}

CHECK = Check(
    name="dcgm",
    levels=("quick", "full", "health"),
    launch=launches.HEAD,
    skip=(),
    plan=_plan,
    by_level=AUTO,
    actions=("dcgm-fail drains the GPU (bench/data/health_actions.json)",),
    what=('`dcgmi diag -r N` on every node whose inventory found `dcgmi`, all at once, each node killing its '
          'own past its timeout (below)'),
    judged=('bench/data/health_actions.json (dcgm-fail drains the GPU); a node past its time is unknown'))
