"""The comm ranks' summary.json -> one row per group and size: times, algbw, busbw, #wrong (bench.analysis.metrics).

    rows = rows_from_summary(summary, "all_reduce", ["all"])
    rows[0]["busbw"]      # bytes/s, nccl-tests' definition (docs/metrics.md, "Collective benchmark")
"""

from __future__ import annotations

from typing import Any

from bench.analysis import metrics


# What a row's time is, said with every table and record of bench comm.
TIMING = ("each sample times k back-to-back collectives between two synchronizes and divides by k (nccl-tests' "
          "way; k per size so a sample lasts >= 5 ms, column k); the time is the median sample's")


def row(op: str, n: int, size: int, times_s: list[float], wrong: int, group: str,
        back_to_back: int = 1) -> dict[str, Any]:
    """One measured size as a JSON row; every figure from bench.analysis.metrics (docs/metrics.md)."""
    t = metrics.summary(times_s)
    nbytes = metrics.nccl_bytes(op, size, n)
    alg = metrics.algbw(nbytes, t.median)
    return {"group": group, "op": op, "ranks": n, "size": size, "bytes": nbytes, "iters": t.n,
            "back_to_back": back_to_back, "time_s": {"min": t.min, "median": t.median, "max": t.max},
            "algbw": alg, "busbw": metrics.busbw(op, alg, n), "wrong": wrong}


def rows_from_summary(summary: dict, op: str, group_names: list[str]) -> list[dict[str, Any]]:
    """Per round, group and size: each iteration's time is the slowest member's; #wrong adds over members.

    Rows carry their round (the groups of one round were measured at the same time)."""
    groups = summary["groups"]
    rounds = summary.get("rounds") or [[gi] for gi in range(len(groups))]
    # Every rank's rows by (group, round), in rank order, in one pass: a pass over every rank per group was
    # groups x ranks (a full validate of 1,000 nodes: 4,000 groups x 8,000 ranks).
    members: dict[tuple[int, int], list] = {}
    for r in summary["ranks"]:
        for g in r["groups"]:
            members.setdefault((g["group"], g.get("round", g["group"])), []).append(g["rows"])
    out = []
    for ri, round_groups in enumerate(rounds):
        for gi in round_groups:
            per_rank = members.get((gi, ri), [])
            for k, first in enumerate(per_rank[0]):
                times = [max(rows[k]["times_s"][i] for rows in per_rank) for i in range(len(first["times_s"]))]
                wrong = sum(rows[k]["wrong"] for rows in per_rank)
                out.append({**row(op, len(groups[gi]), first["size"], times, wrong, group_names[gi],
                                  first.get("back_to_back", 1)), "round": ri})
    return out
