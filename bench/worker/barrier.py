"""Runs launched together start their steps together: a barrier of files in a directory every host shares.

    wait(run_dir, {"dir": D, "count": 3, "timeout_s": 120}, rank)

Rank 0 of each run writes D/<run-id> once its engine is ready; every rank
then waits until `count` such files exist, or the timeout passes (it goes on
and says so in its log: a run that is late or died must not hang the others).
bench validate uses it for its single-node runs, so they are measured at
the same time, under the same load, as the data-parallel run that follows.
"""

from __future__ import annotations

import os
import time


# With an entry per rank (an independent run), how long no other rank has started (written its pid file) before
# the ranks that did start, all in, stop waiting for the rest: those never started (an import that exited, a node
# whose Python is broken) and would otherwise cost every GPU the whole timeout.
QUIET_S = 20.0
# Written in ranks/ by the first barrier of a launch that stopped waiting for ranks that never started: the ranks
# that started are all there will be, and the launch's later barriers (numerics' matmul, then the steps) count
# them at once instead of waiting QUIET_S again.
SETTLED = "settled"


def _started(run_dir: str) -> int:
    try:
        return sum(1 for n in os.listdir(os.path.join(run_dir, "ranks")) if n.startswith("pid-"))
    except OSError:
        return 0


def _settled(run_dir: str) -> int | None:
    try:
        with open(os.path.join(run_dir, "ranks", SETTLED)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _settle(run_dir: str, started: int) -> None:
    """Say that `started` ranks are all this launch will have (each rank that gave up waiting writes the same)."""
    path = os.path.join(run_dir, "ranks", SETTLED)
    try:
        with open(f"{path}.{os.getpid()}", "w") as f:
            f.write(f"{started}\n")
        os.replace(f"{path}.{os.getpid()}", path)
    except OSError:
        pass  # the next barrier waits QUIET_S again: slower, not wrong


def entry_name(run_dir: str, entry: str | None) -> str:
    return os.path.basename(os.path.abspath(run_dir)) + (f"-{entry}" if entry else "")


def wait(run_dir: str, barrier: dict, rank: int, entry: str | None = None) -> float:
    """Block until the barrier is full; returns the seconds waited.

    entry: this rank's own name in the barrier (the ranks of an independent run each count as one run);
    without it, rank 0 enters for its run. A rank that fails before it enters says so (gone()), and with an
    entry per rank the wait also ends once every rank that started is in and none has started for QUIET_S.
    """
    os.makedirs(barrier["dir"], exist_ok=True)
    if rank == 0 or entry is not None:
        with open(os.path.join(barrier["dir"], entry_name(run_dir, entry)), "w") as f:
            f.write(f"{time.time()}\n")
    t0 = time.monotonic()
    started, since = _started(run_dir), time.monotonic()
    if entry is not None and _settled(run_dir) == started:
        since -= QUIET_S  # an earlier barrier of this launch waited for the rest already: none came since
    while (inside := len(os.listdir(barrier["dir"]))) < barrier["count"]:
        now = time.monotonic()
        if now - t0 > barrier["timeout_s"]:
            print(f"start barrier {barrier['dir']}: {inside} of {barrier['count']} runs after "
                  f"{barrier['timeout_s']:.0f} s; starting anyway", flush=True)
            break
        if entry is not None:
            n = _started(run_dir)
            if n != started:
                started, since = n, now
            elif inside >= started and now - since > QUIET_S:
                print(f"start barrier {barrier['dir']}: {inside} of {barrier['count']} ranks in, every one that "
                      f"started; none started for {QUIET_S:.0f} s: starting without the rest", flush=True)
                _settle(run_dir, started)
                break
        time.sleep(0.05)
    return time.monotonic() - t0


def gone(run_dir: str, barrier: dict, entry: str) -> None:
    """This rank failed before it entered: counted in, so the others do not wait for it."""
    path = os.path.join(barrier["dir"], entry_name(run_dir, entry))
    if not os.path.exists(path):
        os.makedirs(barrier["dir"], exist_ok=True)
        with open(path + "-gone", "w") as f:
            f.write(f"{time.time()}\n")
