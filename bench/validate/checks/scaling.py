"""The scaling check: predicted data-parallel efficiency beside the measured one."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, CLUSTER


CHECK = Check(
    name="scaling",
    launch=launches.NONE,
    skip=CLUSTER,
    plan="judged from what was measured",
    what=('predicted data-parallel efficiency beside the measured one'),
    judged=('half the prediction'))
