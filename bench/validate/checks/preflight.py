"""The preflight check: the nodes reached, this machine's Python and package versions, the shared --out."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, EVERY_LEVEL


def _plan(p) -> None:
    from bench.cluster.preflight import wait_s

    p.stages.append({"stage": "preflight", "launches": 0, "timeout_s": p.reach_timeout(wait_s(p.via)),
                     "predicted_s": round(p.reach + 0.5, 1), "how": f"every node at once ({p.via})"})


CHECK = Check(
    name="preflight",
    levels=EVERY_LEVEL,
    launch=launches.HEAD,
    runs="bench.validate.nodes:preflight",
    always=True,
    plan=_plan,
    action="fix the node's software: it differs from this machine (python, torch, deepspeed, shared storage)",
    what=('the nodes reached (ssh, srun or mpirun), Python and package versions, the shared `--out`'),
    judged=('this machine'))
