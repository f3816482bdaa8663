"""Runs launched together start their steps together: a start barrier held by bench's hub, over the rank's phone.

    wait({"name": "gpus-3", "count": 8, "timeout_s": 120}, rank, per_rank=True)

Each rank enters (per_rank: every rank counts as one run; otherwise rank 0
enters for its run) and waits until bench's hub releases the barrier: every
rank in or ended, or every rank that started in with none starting for
QUIET_S (bench.core.conversation.barriers). How many ranks it waits for is
bench's plan, which the hub holds: "count" here is for the rank's log only. Past timeout_s the rank goes on and says
so in its log: a run that is late or died must not hang the others. bench
validate uses it for its per-GPU runs, so they are measured at the same
time, under the same load. Nothing here touches the shared directory.
"""

from __future__ import annotations

from bench.core.conversation import phone


def wait(barrier: dict, rank: int, per_rank: bool) -> float:
    """Block until the barrier is released (or its timeout passes); returns the seconds waited."""
    name, timeout = str(barrier["name"]), float(barrier["timeout_s"])
    line = phone.CURRENT
    if line is None:
        print(f"start barrier {name}: no connection to bench (a rank started without it): starting at once",
              flush=True)
        return 0.0
    waited, why = line.enter(name, timeout, per_rank)
    if why is None:
        print(f"start barrier {name}: not released after {timeout:.0f} s; starting anyway", flush=True)
    elif why != "all in":
        print(f"start barrier {name}: {why}", flush=True)
    return waited
