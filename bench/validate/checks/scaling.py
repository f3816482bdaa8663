"""The scaling check: predicted data-parallel efficiency beside the measured one."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, Row, CLUSTER, FULL_AND_QUICK


def _plan(p) -> None:
    p.none("scaling", "judged from what was measured")


CHECK = Check(
    name="scaling",
    levels=FULL_AND_QUICK,
    launch=launches.NONE,
    runs="bench.validate.scaling:scaling",
    skip=CLUSTER,
    plan=_plan,
    row=Row(
        what=('predicted data-parallel efficiency beside the measured one'),
        judged=('half the prediction')),)
