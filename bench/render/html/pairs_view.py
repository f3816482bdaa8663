"""The inter-node pairs as the page shows them: a leaf-by-leaf matrix of the median bus bandwidth, and the nodes whose
best pair is lowest.

    m = matrix(rec)       # {"leaves": [...], "cells": {(a, b): {"median", "min", "n", "fail"}}, "top": float}
    lowest_best(rec, 20)  # the 20 nodes whose best pair reached least: a node is as fast as its best pair allows

A pair between two leaves crosses their uplinks; within one leaf it does
not. A leaf whose pairs to every other leaf are low is its uplinks; one
node whose best pair is low is its own NIC, cable or port. Without a
topology every node is in one group. The figures are the record's
(measured.pair_busbw: the last look at each pair, bisection's included);
the median is bench.analysis.stats.percentile's.
"""

from __future__ import annotations

from typing import Any

from bench.analysis.stats import percentile
from bench.render.html.node_data import best_pairs
from bench.render.html.validate_view import leaf_of

ALL = "all nodes"


def matrix(rec: dict[str, Any]) -> dict[str, Any] | None:
    measured = rec.get("measured") or {}
    pairs = measured.get("pair_busbw") or {}
    if not pairs:
        return None
    leaves = leaf_of(rec) or {}
    order = list(dict.fromkeys(str(leaves.get(h, ALL if not leaves else "no leaf given")) for h in rec["hosts"]))
    status = {c["node"]: c["status"] for c in rec.get("checks") or [] if c["check"] == "inter-node"}
    got: dict[tuple[str, str], list[float]] = {}
    failed: dict[tuple[str, str], int] = {}
    for name, bw in pairs.items():
        ends = name.split("+")
        if len(ends) != 2 or not isinstance(bw, (int, float)):
            continue
        la, lb = (str(leaves.get(e, ALL if not leaves else "no leaf given")) for e in ends)
        key = tuple(sorted((la, lb), key=lambda x: order.index(x) if x in order else len(order)))
        got.setdefault(key, []).append(bw)
        failed[key] = failed.get(key, 0) + (status.get(name) == "FAIL")
    cells = {k: {"median": percentile(v, 50), "min": min(v), "n": len(v), "fail": failed.get(k, 0)}
             for k, v in got.items()}
    top = max(c["median"] for c in cells.values())
    for c in cells.values():
        c["share"] = c["median"] / top if top else None
    return {"leaves": [x for x in order if any(x in k for k in cells)], "cells": cells, "top": top,
            "by_leaf": bool(leaves), "pairs": sum(c["n"] for c in cells.values())}


def lowest_best(rec: dict[str, Any], count: int = 20) -> list[dict[str, Any]]:
    best = best_pairs(rec)
    leaves = leaf_of(rec) or {}
    rows = [{"host": h, "with": b["with"], "busbw": b["busbw"], "leaf": leaves.get(h)} for h, b in best.items()]
    return sorted(rows, key=lambda r: r["busbw"])[:count]
