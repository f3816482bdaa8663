"""A burn-in's figures over its rounds: per GPU and per link, the spread over time, the worst round, the rounds
that failed, and the round from which a part went bad and stayed bad.

    series = subjects(round_records)          # {("throughput", "n1:0"): [(round, value, status), ...], ...}
    s = summarise(series)                      # one row per subject, costliest change first

Pure: the records of bench validate --soak's rounds in, rows out. A
subject is a check and the row it makes each round (a GPU's throughput or
matmul, a node's intra- or inter-node busbw, a pair's busbw). Figures are
the rows' own (`figure`: higher is better). "since" is the first round of
the last unbroken stretch of non-PASS rounds that reaches the last round:
a GPU or link that went bad at round k and stayed bad (docs/metrics.md, Soak).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench.analysis import metrics

TRACKED = ("throughput", "matmul", "numerics", "intra-node", "inter-node")


@dataclass(frozen=True, slots=True)
class Trend:
    check: str
    node: str
    rounds: int
    min: float | None
    median: float | None
    max: float | None
    spread: float | None         # (max - min) / median over the rounds with a figure
    worst_round: int | None      # the round of the lowest figure (or the first non-PASS without figures)
    failed_rounds: tuple[int, ...]
    not_pass_rounds: tuple[int, ...]
    since: int | None            # bad from this round to the last one
    last_status: str
    points: tuple[tuple[int, float | None, str], ...] = ()   # (round, figure, status), in round order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def subjects(rounds: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[int, float | None, str]]]:
    """(check, node) -> [(round, figure, status)] over the rounds' validate records (summary rows of a node's
    GPUs are left out: their GPUs are subjects of their own)."""
    out: dict[tuple[str, str], list[tuple[int, float | None, str]]] = {}
    for rec in rounds:
        k = (rec.get("soak") or {}).get("round")
        for c in rec.get("checks") or []:
            if c["check"] not in TRACKED or c["status"] == "SKIP":
                continue
            if c.get("host") is None and "+" not in c["node"] and c["node"] != "cluster":
                continue  # a node's summary row over its GPUs
            out.setdefault((c["check"], c["node"]), []).append((k, c.get("figure"), c["status"]))
    return out


def since(statuses: list[tuple[int, str]]) -> int | None:
    """The first round of the unbroken run of non-PASS rounds that reaches the last round, or None."""
    first = None
    for k, status in statuses:
        if status == "PASS":
            first = None
        elif first is None:
            first = k
    return first


def summarise(series: dict[tuple[str, str], list[tuple[int, float | None, str]]]) -> list[Trend]:
    rows = []
    for (check, node), points in series.items():
        points = sorted(points, key=lambda p: p[0])
        values = [v for _, v, _ in points if v is not None]
        low = min(values) if values else None
        med = metrics.percentile(values, 50) if values else None
        bad = [k for k, _, s in points if s != "PASS"]
        worst = (min((p for p in points if p[1] is not None), key=lambda p: p[1])[0] if values
                 else (bad[0] if bad else None))
        rows.append(Trend(check, node, len(points), low, med, max(values) if values else None,
                          (max(values) - low) / med if values and med else None, worst,
                          tuple(k for k, _, s in points if s == "FAIL"), tuple(bad),
                          since([(k, s) for k, _, s in points]), points[-1][2], tuple(points)))
    # What went bad and stayed bad first, then what failed at all, then the widest spread.
    return sorted(rows, key=lambda t: (t.since is None, not t.failed_rounds, -(t.spread or 0.0), t.check, t.node))
