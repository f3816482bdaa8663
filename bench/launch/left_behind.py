"""An independent run's ranks that went silent while the others finished: a hang, long before the watchdog's.

    lb = LeftBehind(run_dir, plan, started=time.time())
    lb.hung(now, last_progress)     # True once the rest finished and these made no progress for as long again

bench validate's per-GPU launch runs every GPU alone, all at once (bench.jobs.alone):
each rank writes alone/rank<R>.json when it is done, and none waits for
another. One rank stopped (SIGSTOP, a GPU fallen off the bus, a blocked read)
would hold the launch until the watchdog's wait for progress (the level's
timeout: 4 to 15 minutes at 1,000 nodes), while every other rank finished
long before. Here a launch whose ranks have mostly finished, and that has
seen neither progress nor another rank finish for as long as the finished
ones took from the launch (at least FLOOR_S), is hung: the usual hang path
follows (every rank asked where it is, the group stopped, the silent ranks
named). A rank that is slow but stepping writes progress and is never cut.

One process per launch (bench's, not the ranks) lists alone/ at most every
LIST_EVERY_S seconds: the shared directory's load does not grow with ranks.
"""

from __future__ import annotations

import os
from typing import Any

# The least a finished launch waits for its silent ranks: start-up jitter, a node's slower disk.
FLOOR_S = 30.0
# How often the finished ranks are counted (one listing of alone/).
LIST_EVERY_S = 2.0


class LeftBehind:
    def __init__(self, run_dir: str, plan: dict[str, Any], started: float):
        self.dir = os.path.join(run_dir, "alone")
        self.world = int(plan.get("world_size") or 0)
        self.on = bool(plan.get("independent")) and self.world > 1
        self.started, self.listed, self.done, self.last_done = started, 0.0, 0, None

    def _count(self, now: float) -> None:
        if now - self.listed < LIST_EVERY_S:
            return
        self.listed = now
        try:
            done = sum(1 for n in os.listdir(self.dir) if n.startswith("rank") and n.endswith(".json"))
        except OSError:
            done = 0
        if done != self.done:
            self.done, self.last_done = done, now

    def hung(self, now: float, last_progress: float) -> bool:
        """Whether the ranks still running are left behind: at least half finished, the rest silent (no progress,
        none finished) for as long as the finished ones took, and at least FLOOR_S."""
        if not self.on:
            return False
        self._count(now)
        if self.last_done is None or not self.world / 2 <= self.done < self.world:
            return False
        quiet = now - max(last_progress, self.last_done)
        return quiet > max(FLOOR_S, self.last_done - self.started)
