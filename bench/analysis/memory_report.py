"""A memory sweep's rows -> one row per strategy: its figures and the largest micro batch it fitted. Pure.

    strategies(group.rows)   # [{"strategy": "zero3", "states": ..., "images_per_s": ..., "max_batch": {...}}, ...]

The strategy's own point (memory/<strategy>/gpus=N) gives the figures at the
base micro batch; the points of its --find-max-batch search
(.../mb=<b>, labels.search_of) give the batch: the largest that ran `ok`
and the smallest above it that ended `oom`. No search, or one that never
met the wall (it stopped at --max-micro-batch): `oom` is None and says so.
"""

from __future__ import annotations

from typing import Any


def strategies(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = [r for r in rows if (r.get("labels") or {}).get("strategy") and not r["labels"].get("search_of")]
    out = []
    for r in base:
        tries = {r["micro_batch"]: r["status"]}
        for q in rows:
            if (q.get("labels") or {}).get("search_of") == r["id"]:
                tries[q["micro_batch"]] = q["status"]
        fits = max((b for b, s in tries.items() if s == "ok"), default=None)
        oom = min((b for b, s in tries.items() if s == "oom" and (fits is None or b > fits)), default=None)
        searched = len(tries) > 1
        out.append({
            "strategy": r["labels"]["strategy"], "id": r["id"], "status": r["status"], "gpus": r["gpus"],
            "model": r.get("model"), "split": r.get("split"), "comm_tp": r.get("comm_tp"),
            "micro_batch": r["micro_batch"], "images_per_s": r["images_per_s"], "comm_share": r["comm_share"],
            "states": r["states"], "states_formula": r["states_formula"], "states_deepspeed": r["states_deepspeed"], "states_nvme": r.get("states_nvme"),
            "peak_memory_bytes": r["peak_memory_bytes"], "memory_kind": r["memory_kind"], "reason": r["reason"],
            "max_batch": {"fits": fits, "oom": oom, "tries": dict(sorted(tries.items())),
                          "note": None if oom is not None or not searched else
                          "no OOM up to the largest batch tried: the wall is higher (or no memory limit)"}
            if searched else None,
        })
    return out
