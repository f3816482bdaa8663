"""Where this rank is: the step it runs, the collectives it has issued (numbered), and the ones still in flight.

    POSITION.begin_step()                  # the training loop, through the comm counter
    seq = POSITION.enter("all_reduce")     # the counter's wrapper, around every collective
    POSITION.leave(seq)                    # on return, or when an async collective's Work completes
    POSITION.snapshot()                    # {"step", "seq", "in_flight": [...], "failed": ...}: a JSON dict

Every rank of a data-parallel run issues the same collectives in the same
order, so the n-th collective of one rank is the n-th of every other: when
a run hangs, ranks waiting in collective #1705 while one rank is still at
#1704, or in none at all, name that rank (bench.launch.whereabouts). The
numbers count every collective bench's comm counter sees (bench.worker.
comm_counter), inside steps and outside (DeepSpeed's parameter broadcast at
start, evaluation, the final gather), and begin at 1.

Read from another thread (the phone's reader thread answering bench's stack
request, bench.worker.stall) while the training thread writes: a lock keeps
a snapshot whole. Pure Python: no torch.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class Position:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.step = 0                      # steps begun: 1 while the first step runs, 0 before it
        self.seq = 0                       # the number of the last collective issued
        self._in_flight: dict[int, tuple[str, int, float]] = {}  # seq -> (op, step, since: monotonic)
        self.failed: dict[str, Any] | None = None   # the collective that raised (a timeout, a peer gone)

    def begin_step(self) -> None:
        with self._lock:
            self.step += 1

    def enter(self, op: str) -> int:
        with self._lock:
            self.seq += 1
            self._in_flight[self.seq] = (op, self.step, time.monotonic())
            return self.seq

    def leave(self, seq: int, error: BaseException | None = None) -> None:
        with self._lock:
            op, step, since = self._in_flight.pop(seq, ("?", self.step, time.monotonic()))
            if error is not None and self.failed is None:
                first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                self.failed = {"seq": seq, "op": op, "step": step, "after_s": round(time.monotonic() - since, 3),
                               "error": f"{type(error).__name__}: {first}"[:300]}

    def snapshot(self) -> dict[str, Any]:
        """The position as JSON: the oldest collective in flight first (the one the rank waits on)."""
        now = time.monotonic()
        with self._lock:
            flying = [{"seq": s, "op": op, "step": step, "for_s": round(now - since, 3)}
                      for s, (op, step, since) in sorted(self._in_flight.items())]
            return {"step": self.step, "seq": self.seq, "in_flight": flying, "failed": self.failed}


# The rank's one position: its comm counter writes it, its stack answer and failure report read it.
POSITION = Position()
