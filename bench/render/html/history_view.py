"""A node's sparkline in report.html: its slowest GPU over each run's median, over its last runs and this one.

    spark(rec, "node7")   # {"points": "0,9.0 4,8.1 ...", "width", "height", "text": "history: ..."} or None

From the record's measured "history" (bench.history.hook puts each node's
earlier runs there from the history store; none where the store was off,
empty or could not be read: then no sparkline). A run where the node was
drained is drawn at the bottom and named in the text.
"""

from __future__ import annotations

import statistics
from typing import Any

WIDTH, HEIGHT, STEP = 48, 12, 2.4


def _now(rec: dict[str, Any], host: str) -> float | None:
    figs = {s: x for s, x in ((rec.get("measured") or {}).get("gpu_images_per_s") or {}).items()
            if isinstance(x, (int, float)) and x > 0}
    if not figs:
        return None
    mid = statistics.median(figs.values())
    mine = [x for s, x in figs.items() if s.rpartition(":")[0] == host]
    return min(mine) / mid if mine and mid > 0 else None


def spark(rec: dict[str, Any], host: str) -> dict[str, Any] | None:
    trail = ((rec.get("measured") or {}).get("history") or {}).get(host)
    if not isinstance(trail, dict) or not trail.get("verdicts"):
        return None
    verdict = ((rec.get("nodes") or {}).get(host) or {}).get("verdict")
    verdicts = [*trail["verdicts"], verdict]
    rels = [*(trail.get("gpu_rel") or [None] * len(trail["verdicts"])), _now(rec, host)]
    known = [x for x in rels if isinstance(x, (int, float))]
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)
    span = (hi - lo) or 1.0
    points = []
    for i, (x, v) in enumerate(zip(rels, verdicts)):
        y = HEIGHT - 1 if v == "drain" or not isinstance(x, (int, float)) else 1 + (hi - x) / span * (HEIGHT - 2)
        points.append(f"{i * STEP:.1f},{y:.1f}")
    drained = verdicts.count("drain")
    text = (f"history: {len(verdicts)} run(s), slowest GPU {known[0]:.3f} -> {known[-1]:.3f} of the median"
            if known else f"history: {len(verdicts)} run(s)") + (f"; drained in {drained}" if drained else "")
    return {"points": " ".join(points), "width": max(WIDTH, int(len(points) * STEP) + 1), "height": HEIGHT,
            "text": text}
