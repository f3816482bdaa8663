"""The memory check: a copy within each GPU's memory, in the copies' phase of the per-GPU launch."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, Row, FULL_AND_QUICK, NODES


CHECK = Check(
    name="memory",
    levels=FULL_AND_QUICK,
    launch=launches.PER_GPU,
    phase=launches.COPIES,
    runs="bench.validate.copies:memory",
    skip=NODES,
    soak=True,
    actions=("the copy code's action in bench/data/health_actions.json",),
    row=Row(
        what=("a copy within each GPU's memory, read and write counted (on CPU ranks a memcpy), alone and all at "
              'once, in the same launch'),
        judged=('its peers and the published figure for its memory (HBM3, GDDR6, ...)')),)
