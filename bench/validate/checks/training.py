"""The training check: a short data-parallel run over what is still good."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, CLUSTER


def _plan(p) -> None:
    p.launch("training", p.lv.dp_steps * (p.step + p.allreduce_s(p.size, p.ranks)),
             f"data-parallel {p.model} over every good GPU, {p.lv.dp_steps} steps")


CHECK = Check(
    name="training",
    launch=launches.OWN,
    skip=CLUSTER,
    plan=_plan,
    what=('a short data-parallel run over what is still good'),
    judged=('loss falls, world size, ranks agree'))
