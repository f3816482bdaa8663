"""The reports of a phase every rank of a launch ran beside its job (validate's copies and burn), read back by name.

    rec["copies"] = collect(run_dir, resources, outcome, "copies")   # one entry per rank, host and slot
    entry["status"], entry.get("phases"), entry.get("reason")

A rank writes <folder>/rank<R>.json (bench.worker.copies, bench.worker.burn);
bench reads each by name (bench.launch.records: a rank that said it wrote one
and whose file is missing is an error naming it), never by listing the
folder. A rank without one failed, or never reached the phase: its own
report, the launch's diagnosis, or why it left none.
"""

from __future__ import annotations

import os
from typing import Any

from bench.core.placement import rank_slots
from bench.jobs.alone import measured, silent_rank
from bench.launch.execute import Outcome
from bench.launch.records import read_rank


def collect(run_dir: str, resources: dict[str, list[int]], outcome: Outcome, folder: str) -> list[dict[str, Any]]:
    """One entry per rank: its report (status ok) with host and slot, or failed with why."""
    named = (outcome.error or {}).get("rank")
    out = []
    for rank, (host, slot) in enumerate(rank_slots(resources)):
        got, missing = read_rank(run_dir, os.path.join(folder, f"rank{rank}.json"), rank, outcome.ranks)
        got = got if isinstance(got, dict) else {}
        if got.get("status") == "ok":
            out.append({**got, "rank": rank, "host": host, "slot": slot, "hostname": got.get("host")})
            continue
        own = next((r for r in outcome.rank_files if r.get("rank") == rank), None) or {}
        reason = missing or ((outcome.error or {}).get("reason") if rank == named else None) or own.get("error") or \
            silent_rank(run_dir, outcome, rank)
        out.append({"rank": rank, "host": host, "slot": slot, "status": "failed", "reason": reason,
                    "measured": measured(own)})
    return out
