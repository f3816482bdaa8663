"""The stragglers check: the costliest GPU, rank or link, and the --exclude that drops it."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, CLUSTER


CHECK = Check(
    name="stragglers",
    launch=launches.NONE,
    runs="bench.validate.scaling:stragglers",
    skip=CLUSTER,
    plan="judged from what was measured",
    actions=("the --exclude that drops it",),
    what=('the costliest GPU, rank or link and its cost'),
    judged=("10% (or 3 standard errors, or a GPU's per-GPU noise line)"))
