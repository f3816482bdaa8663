"""Real fleets through bench's own judge: how many healthy GPUs and nodes it flags and drains, which outliers it names.

    .venv/bin/python benchmarks/fleet_replay.py                     # every set; ~1 min on 2 cores
    .venv/bin/python benchmarks/fleet_replay.py --repeats 1,3 --seeds 10 --json fleet.json
    .venv/bin/python benchmarks/fleet_replay.py --smoke             # one GPU set, one pair set, one seed

The data are real measurements (../shared/fixtures/fleets, SOURCES.md there):
per-GPU job times of V100 fleets (TACC Longhorn, Frontera, Lonestar6) and
nccl-tests logs of a healthy 10-node and an unhealthy 17-node H100 set.

GPU sets (benchmarks/_fleet_gpus.py): bench.validate.gpus.throughput over
each set's GPUs, round r of its launch answered by each GPU's run r. At
--repeats 1 that is what a validate sees by default (one round, and a second
when the first names a straggler); at --repeats N the GPUs with N runs. The
reference is what every run of the set shows (_fleet_gpus.outliers: GPUs
and whole nodes slower than 3 robust standard deviations of their peers
over all their runs, 2% at least); the named nodes are SOURCES.md's. Per
set: healthy GPUs WARNed and FAILed per 1,000, healthy nodes drained per
1,000 (named), the outlier GPUs flagged, and each straggler node's row.

H100 pair sets (benchmarks/_fleet_pairs.py): bench.validate.pairs.inter_node
at quick and full, over --seeds seeds of the pair plan, each pair's one
logged figure for every look at it; per set, GPUs per node and test: the
exit statuses, and the nodes WARNed, FAILed, drained and held (the breaker).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _fleet_gpus, _fleet_pairs  # noqa: E402
from benchmarks._common import machine  # noqa: E402

SMOKE = "# SMOKE RUN (--smoke)"


def _spec(text: str) -> tuple[str, int]:
    """'quick' or 'full': that level as a validate without --repeats runs it; a number N: --repeats N."""
    return (text, 1) if not text.isdigit() else ("quick", int(text))


def gpu_table(sets: list[str], repeats: list[str]) -> list[dict]:
    rows = []
    print(f"{'GPU set':27} {'rep':>5} {'GPUs':>5} {'nodes':>5} {'WARN/1k':>7} {'FAIL/1k':>7} {'drain/1k':>8}  "
          "outliers flagged; straggler nodes' rows; healthy nodes drained; healthy node rows flagged")
    for name in sets:
        fleet = _fleet_gpus.load(name)
        for k in repeats:
            level, n = _spec(k)
            got = _fleet_gpus.replay(fleet, n, name, level)
            if not got["gpus"]:
                print(f"{name:27} {k:>5}     0  (no GPU has the runs it takes)")
                continue
            t = _fleet_gpus.tally(fleet, got, _fleet_gpus.NAMED.get(name, ()))
            nodes = " ".join(f"{n}={s}" for n, s in t["whole_nodes"].items()) or "none"
            print(f"{name:27} {k:>5} {t['gpus']:>5} {t['nodes']:>5} {t['healthy_warn_per_1000']:>7.1f} "
                  f"{t['healthy_fail_per_1000']:>7.1f} {t['healthy_nodes_drained_per_1000']:>8.1f}  "
                  f"{t['outlier_gpus_flagged']}/{t['outlier_gpus']}; {nodes}; "
                  f"drained: {', '.join(t['healthy_nodes_drained']) or 'none'}; "
                  f"node rows: {', '.join(t['healthy_node_rows_flagged']) or 'none'} (rounds {t['rounds']})")
            rows.append({"set": name, "repeats": k, **t})
    for k in repeats:
        mine = [r for r in rows if r["repeats"] == k]
        healthy = sum(r["gpus"] - r["outlier_gpus"] for r in mine)
        flagged = sum(len(r["healthy_flagged"]) for r in mine)
        drained = sum(len(r["healthy_nodes_drained"]) for r in mine)
        rows_flagged = sum(len(r["healthy_node_rows_flagged"]) for r in mine)
        print(f"all GPU sets at {'--repeats ' + k if k.isdigit() else k}: {flagged} of {healthy} healthy GPUs flagged "
              f"({1000 * flagged / max(1, healthy):.1f} per 1,000), {drained} healthy node(s) drained, "
              f"{rows_flagged} healthy node row(s) flagged")
    return rows


def _said(logs: dict) -> str:
    """One line: what the logs blame (benchmarks/_fleet_pairs.logs_blame)."""
    parts = [f"{h} short with {k} of {n} partners (chance {c:.0e}; {', '.join(logs['known_good'][h]) or 'none'} "
             "short with no one else): the node, drain" for h, (k, n, c) in logs["nodes"].items()]
    if logs["islands"]:
        parts.append(" | ".join(",".join(h[-3:] for h in i) for i in logs["islands"]) +
                     ": islands, the path between them")
    if not logs["short"]:
        return f"none of {logs['pairs']} pairs short: every node healthy"
    if logs["links"]:
        parts.append(f"{len(logs['links'])} short link(s) no node explains")
    return f"{logs['short']} of {logs['pairs']} pairs short; " + "; ".join(parts)


def _verdict(t: dict, host: str) -> str:
    if host in t["drained"]:
        return "drained"
    if host in t["held"]:
        return "held"
    return "FAIL" if host in t["fail"] else "WARN" if host in t["warn"] else "missed"


def pair_table(sets: list[str], seeds: int, smoke: bool) -> list[dict]:
    rows = []
    print(f"{'pair set':18} {'G':>2} {'test':14} {'level':5} {'exit 0':>6}  nodes WARN / FAIL / drained / held "
          "(in how many seeds)")
    for name in sets:
        figs = _fleet_pairs.load(name)
        for (g, test), pairs in sorted(figs.items()):
            if smoke and (g, test) != min(figs):
                continue
            logs = _fleet_pairs.logs_blame(pairs)
            print(f"{name:18} {g:>2} {test:14} the logs: {_said(logs)}")
            for level in ("quick", "full"):
                got = [_fleet_pairs.tally(_fleet_pairs.replay(pairs, g, level, seed)) for seed in range(1, seeds + 1)]
                count = {key: collections.Counter(h for t in got for h in t[key]) for key in
                         ("warn", "fail", "drained", "held")}
                text = " / ".join(", ".join(f"{h[-3:]}x{n}" for h, n in sorted(c.items())) or "-"
                                  for c in count.values())
                ok = sum(t["exit"] == 0 for t in got)
                # Each node the logs blame: drained (its FAIL, the breaker not holding it), held, WARNed, or missed.
                verdicts = {h: collections.Counter(_verdict(t, h) for t in got) for h in logs["nodes"]}
                said = "; ".join(f"{h[-3:]} " + ", ".join(f"{k} {n}" for k, n in sorted(c.items()))
                                 for h, c in verdicts.items())
                print(f"{name:18} {g:>2} {test:14} {level:5} {ok:>3}/{seeds:<2}  {text}"
                      + (f"  | the logs' node: {said} of {seeds}" if said else ""))
                rows.append({"set": name, "gpus": g, "test": test, "level": level, "seeds": seeds, "exit_0": ok,
                             **{k: dict(c) for k, c in count.items()},
                             "logs": {"nodes": {h: list(x) for h, x in logs["nodes"].items()},
                                      "links": len(logs["links"]), "islands": logs["islands"]},
                             "logs_nodes": {h: dict(c) for h, c in verdicts.items()}})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="one GPU set at --repeats 1, one pair set, one seed")
    p.add_argument("--repeats", default="quick,full,3,5",
                   help="how to replay the GPU sets: a level as a validate without --repeats runs it (quick: one "
                        "round, a second where a GPU would be a straggler; full: the level's repeats where its "
                        "first round names a GPU or node), or N: --repeats N")
    p.add_argument("--seeds", type=int, default=10, help="pair-plan seeds per pair set, level and GPU count")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    if args.smoke:
        print(SMOKE)
    print(machine(), flush=True)
    t0 = time.perf_counter()
    gpu_sets = ["resnet-ls6-agg.csv"] if args.smoke else list(_fleet_gpus.SETS)
    repeats = ["quick"] if args.smoke else [x.strip() for x in args.repeats.split(",")]
    bad = [x for x in repeats if not (x.isdigit() and int(x) >= 1) and x not in ("quick", "full")]
    if bad:
        p.error(f"--repeats: {bad[0]!r} is neither quick, full nor a count of rounds")
    gpus = gpu_table(gpu_sets, repeats)
    pair_sets = ["example-cluster01"] if args.smoke else list(_fleet_pairs.SETS)
    pairs = pair_table(pair_sets, 1 if args.smoke else args.seeds, args.smoke)
    print(f"fleet_replay: {len(gpus)} GPU replays, {len(pairs)} pair replays in {time.perf_counter() - t0:.1f} s"
          + (": not judged (smoke run)" if args.smoke else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpus": gpus, "pairs": pairs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
