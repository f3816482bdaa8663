"""The memory check: a copy within each GPU's memory, in the copies' phase of the per-GPU launch."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


CHECK = Check(
    name="memory",
    phase=launches.COPIES,
    runs="bench.validate.copies:memory",
    actions=("the copy code's action in bench/data/health_actions.json",),
    what=("a copy within each GPU's memory, read and write counted (on CPU ranks a memcpy), alone and all at "
          'once, in the same launch'),
    judged=('its peers and the published figure for its memory (HBM3, GDDR6, ...)'))
