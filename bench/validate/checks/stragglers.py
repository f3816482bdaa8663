"""The stragglers check: the costliest GPU, rank or link, and the --exclude that drops it."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, Row, CLUSTER, FULL_AND_QUICK


def _plan(p) -> None:
    p.none("stragglers", "judged from what was measured")


CHECK = Check(
    name="stragglers",
    levels=FULL_AND_QUICK,
    launch=launches.NONE,
    runs="bench.validate.scaling:stragglers",
    skip=CLUSTER,
    plan=_plan,
    actions=("the --exclude that drops it",),
    row=Row(
        what=('the costliest GPU, rank or link and its cost'),
        judged=("10% (or 3 standard errors, or a GPU's per-GPU noise line)")),)
