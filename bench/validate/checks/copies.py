"""The copies check: each GPU's copies to and from its host, alone on its node and all at once."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


CHECK = Check(
    name="copies",
    phase=launches.COPIES,
    actions=("bind each rank to its GPU's NUMA node (the binding row)",
             "the copy code's action in bench/data/health_actions.json"),
    what=("each GPU's copies to and from its host (pinned): H2D, D2H and both at once, each GPU alone on its "
          "node and then all at once; run by the per-GPU runs' ranks after the numerics job (on CPU ranks a "
          "host copy); a `binding` row (WARN) where the rank's CPUs are all on another NUMA node than its GPU"),
    judged=('alone: its peers (same model, PCIe generation and width) and the published copy for its link; all '
            'at once: its peers (below)'))
