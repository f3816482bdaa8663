"""validate --baseline DIR: each GPU's throughput and each node's bandwidth against an earlier validate run.

bench compare's rule (bench.analysis.compare: a fall beyond the threshold
and the spread is a regression), one `baseline` row per GPU, node and the
cluster that has a figure on both sides.
"""

from __future__ import annotations

import time

from bench.analysis import compare
from bench.core.errors import BadInput
from bench.validate.state import CLUSTER, Validation


def load(cfg) -> tuple[dict, float] | None:
    """--baseline's passing validate records as compare samples, and the threshold; None without --baseline."""
    if cfg.baseline is None:
        return None
    limit = compare.parse_threshold(cfg.threshold)
    records, _ = compare.load(cfg.baseline)
    validates = [r for r in records if r.get("kind") == "validate" and r.get("level") == cfg.level]
    got = compare.samples(validates)
    if not got:
        raise BadInput(f"--baseline: {cfg.baseline} holds no passing validate record at --level {cfg.level}")
    return got, limit


def against(v: Validation, base: dict, limit: float) -> None:
    """One `baseline` check per GPU, node (and the cluster) with a figure in both: FAIL where it regressed."""
    t0 = time.time()
    now = compare.samples([{"kind": "validate", "status": "ok", "level": v.cfg.level, "measured": v.figures,
                            "identity": v.identity(), "resources": v.resources}])
    result = compare.compare(base, now, limit)
    prefix = f"validate {v.cfg.level} "
    by_node: dict[str, list] = {}
    for row in result.rows:
        if row.figure in compare.JUDGED:
            name = row.subject[len(prefix):]
            node, _, what = name.partition(" ")   # "host:slot", "host", "host inter-node", "cluster x6"
            by_node.setdefault(CLUSTER if node == "cluster" else node, []).append((what or "", row))
    for node, pairs in by_node.items():
        rows = [r for _, r in pairs]
        bad = [f"{(w + ' ') if w and node != CLUSTER else ''}{r.figure}" for w, r in pairs if r.verdict == "regressed"]
        shown = "; ".join(f"{(w + ' ') if w and node != CLUSTER else ''}{r.figure} {r.change:+.1%}" for w, r in pairs)
        spread = [f"{r.figure} spread {r.spread:.1%}" if r.spread is not None else f"{r.figure}: one run a side"
                  for r in rows]
        host, _, slot = node.rpartition(":")
        where = {"host": host, "gpu": int(slot)} if slot.isdigit() and host in v.resources else \
            {"host": node} if node in v.resources else {}
        v.add("baseline", node, "FAIL" if bad else "PASS", shown, f"{v.cfg.baseline} (threshold {limit:.0%})",
              ("regressed: " + ", ".join(bad) + "; " if bad else "") + "; ".join(spread), t0=t0,
              **where)
    if not by_node:
        v.add("baseline", CLUSTER, "SKIP", reason=f"nothing measured here was measured in {v.cfg.baseline}")
