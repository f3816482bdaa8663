"""An independent run's ranks that went silent while the others finished: a hang, long before the watchdog's.

    lb = LeftBehind(hub.done_count, plan, started=time.time())
    lb.hung(now, last_progress)     # True once the rest finished and these made no progress for as long again

bench validate's per-GPU launch runs every GPU alone, all at once (bench.jobs.alone):
each rank writes alone/rank<R>.json and tells bench's hub when it is done
(bench.core.conversation), and none waits for another. One rank stopped (SIGSTOP, a GPU fallen off the bus, a blocked read)
would hold the launch until the watchdog's wait for progress (the level's
timeout: 4 to 15 minutes at 1,000 nodes), while every other rank finished
long before. Here a launch whose ranks have mostly finished, and that has
seen neither progress nor another rank finish for as long as the finished
ones took from the launch (at least FLOOR_S), is hung: the usual hang path
follows (every rank asked where it is, the group stopped, the silent ranks
named). A rank that is slow but stepping writes progress and is never cut.

The count of finished ranks is the hub's: nothing here reads the shared directory.
"""

from __future__ import annotations

from typing import Any, Callable

# The least a finished launch waits for its silent ranks: start-up jitter, a node's slower disk.
FLOOR_S = 30.0


class LeftBehind:
    def __init__(self, done_count: Callable[[], int], plan: dict[str, Any], started: float):
        self.done_count = done_count  # ranks that told bench they ended well
        self.world = int(plan.get("world_size") or 0)
        self.on = bool(plan.get("independent")) and self.world > 1
        self.started, self.done, self.last_done = started, 0, None

    def _count(self, now: float) -> None:
        done = self.done_count()
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
