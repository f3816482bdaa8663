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


def wait(run_dir: str, barrier: dict, rank: int, entry: str | None = None) -> float:
    """Block until the barrier is full; returns the seconds waited.

    entry: this rank's own name in the barrier (the ranks of an independent run each count as one run);
    without it, rank 0 enters for its run.
    """
    os.makedirs(barrier["dir"], exist_ok=True)
    if rank == 0 or entry is not None:
        name = os.path.basename(os.path.abspath(run_dir)) + (f"-{entry}" if entry else "")
        with open(os.path.join(barrier["dir"], name), "w") as f:
            f.write(f"{time.time()}\n")
    t0 = time.monotonic()
    while len(os.listdir(barrier["dir"])) < barrier["count"]:
        if time.monotonic() - t0 > barrier["timeout_s"]:
            print(f"start barrier {barrier['dir']}: {len(os.listdir(barrier['dir']))} of {barrier['count']} runs "
                  f"after {barrier['timeout_s']:.0f} s; starting anyway", flush=True)
            break
        time.sleep(0.05)
    return time.monotonic() - t0
