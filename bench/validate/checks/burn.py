"""The burn check: every GPU of a node trains at once for --burn, sampled each second by its backend."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


CHECK = Check(
    name="burn",
    phase=launches.BURN,
    actions=("burn-fell-behind, burn-throttled-alone, gpu-unreachable: bench/data/health_actions.json",),
    what=('`--burn DURATION` (3 minutes at `full`, off at `quick`): every GPU of every node trains at once '
          'after its timed steps, one thread per node reading its GPUs each second through their backend'),
    judged=("the GPU's first minute and the node's other GPUs (below)"))
