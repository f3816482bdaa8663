"""The per-GPU sets of ../shared/fixtures/fleets/gpu-variability, read and replayed through bench's per-GPU check.

    fleet = load("resnet-ls6-agg.csv")          # {(node, gpu): [time of run 1, run 2, ...]} in run order
    got = replay(fleet, repeats=1, name="ls6")  # bench.validate.gpus.throughput over it: statuses and drains
    truth = outliers(fleet)                     # what every run the set holds shows

Each row of a set is one job run on one GPU; its `perf` is a time (lower is
faster), so the figure bench judges is 1 / perf, as images/s is 1 / step.
A GPU's node is its cabinet and node (c196-112); the SGEMM rows that name no
cabinet (-1) take their GPU's node from its other rows, else are dropped.
Runs are in the order the set recorded them (its timestamp, else its
repetition number).

replay() runs bench.validate.gpus.throughput itself on a Validation of
those nodes, with bench.validate.runs.alone answered from the set: round r
of the launch is each GPU's run r (--repeats N: runs 1..N; the default
single round, and the second round bench takes when its first names a
straggler: runs 1 and 2; a GPU with one run answers it again). Every line,
verdict and drain is bench's own; only the launch is not run.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shared fixtures beside the checkout (../shared), or where BENCH_FLEETS says.
FLEETS = os.environ.get("BENCH_FLEETS") or os.path.normpath(os.path.join(HERE, "..", "shared", "fixtures", "fleets"))
GPU_DIR = os.path.join(FLEETS, "gpu-variability")
SETS = ("sgemm-longhorn-agg.csv", "resnet-longhorn-agg.csv", "bert-longhorn-agg.csv", "pagerank-longhorn-agg.csv",
        "frontera-resnet-agg.csv", "frontera-bert-agg.csv", "frontera-pagerank-agg.csv", "resnet-ls6-agg.csv")
# The whole-node stragglers SOURCES.md names (all GPUs of each node slow, in the ResNet sets).
NAMED = {"frontera-resnet-agg.csv": ("c196-112", "c197-91", "c198-32"),
         "resnet-ls6-agg.csv": ("c316-8", "c317-12"),
         "resnet-longhorn-agg.csv": ("c006-12", "c007-12", "c008-8")}
FLOOR = 0.02          # as bench.analysis.peer_lines.FLOOR: no two runs of one GPU agree closer


def load(name: str, folder: str = GPU_DIR) -> dict[tuple[str, str], list[float]]:
    with open(os.path.join(folder, name), newline="") as f:
        rows = list(csv.DictReader(f))
    node_of = {}
    for r in rows:
        if r.get("cabinet", "-1") not in ("-1", "") and r.get("node", "-1") not in ("-1", ""):
            node_of[r["uuid"]] = f"{r['cabinet']}-{int(r['node'])}"
    runs: dict[tuple[str, str], list[tuple[tuple[float, float], float]]] = defaultdict(list)
    for r in rows:
        if r["uuid"] in node_of and float(r["perf"]) > 0:
            order = (float(r.get("ts") or 0), float(r.get("reps") or r.get("run") or 0))
            runs[(node_of[r["uuid"]], r["uuid"])].append((order, float(r["perf"])))
    return {k: [p for _, p in sorted(v, key=lambda x: x[0])] for k, v in sorted(runs.items())}


def _robust(logs: list[float]) -> float:
    centre = statistics.median(logs)
    return 1.4826 * statistics.median([abs(x - centre) for x in logs])


def _line(logs: list[float]) -> float:
    """3 robust standard deviations of these log ratios, the floor at least (as bench.analysis.peer_lines)."""
    return max(3 * _robust(logs), -math.log(1 - FLOOR))


def outliers(fleet: dict[tuple[str, str], list[float]]) -> tuple[set[tuple[str, str]], set[str]]:
    """(GPUs, whole nodes) that every run the set holds shows slow: a GPU whose median speed over all its runs is
    below the fleet's median GPU by more than 3 robust standard deviations of those medians (2% at least), and a
    node every GPU of which is below the median GPU and whose median GPU is below the nodes' median by more than 3
    robust standard deviations of the nodes' medians (2% at least). The reference a validate that sees one run, or
    a few, is measured against: it is what all of a set's runs (5 to 139 a GPU; 1 on Lonestar6) say."""
    speed = {k: 1 / statistics.median(v) for k, v in fleet.items()}
    med = statistics.median(speed.values())
    logs = {k: math.log(x / med) for k, x in speed.items()}
    line = _line(list(logs.values()))
    slow = {k for k, d in logs.items() if d < -line}
    nodes: dict[str, list[float]] = defaultdict(list)
    for k, d in logs.items():
        nodes[k[0]].append(d)
    medians = {n: statistics.median(ds) for n, ds in nodes.items() if len(ds) >= 2}
    centre, node_line = statistics.median(medians.values()), _line(list(medians.values()))
    whole = {n for n, m in medians.items() if max(nodes[n]) < 0 and m - centre < -node_line}
    return slow, whole


def replay(fleet: dict[tuple[str, str], list[float]], repeats: int, name: str, level: str = "quick") -> dict[str, Any]:
    """bench.validate.gpus.throughput at `level` over the set's GPUs that have the runs it may take (--repeats
    `repeats`, or without it the level's own repeats): {"status": {(node, gpu): status}, "node_status": {node:
    its node row's status}, "drained": [nodes], "gpus": n, "rounds": rounds taken, "lines": the record's
    gpu_lines}."""
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import config, drain, gpus, runs
    from bench.validate.state import Validation

    # getattr: the same script replays a bench without Level.repeats (main before it), for the figures before.
    fleet = {k: v for k, v in fleet.items() if len(v) >= max(repeats, getattr(config.LEVELS[level], "repeats", 1))}
    by_node: dict[str, list[str]] = defaultdict(list)
    for node, gpu in fleet:
        by_node[node].append(gpu)
    res = {n: list(range(len(g))) for n, g in by_node.items()}
    cfg = config.ValidateConfig(level=level, checks=("throughput",), repeats=repeats)
    v = Validation(cfg, HostSelection(), res, references.load(), "/nonexistent")
    v.device = "cuda"
    model = f"replayed {name}"  # a name no published figure has: judged against its peers alone
    v.inventory = {n: {"gpus": [{"index": i, "name": model} for i in s]} for n, s in res.items()}

    def alone(v_, resources, tag, steps=None, with_numerics=False, extras=False):
        r = 0 if tag == "throughput" else 1 if tag == "throughput-repeat" else int(tag.rsplit("-r", 1)[1]) - 1
        out = []
        for node, slots in resources.items():
            for s in slots:
                times = fleet[(node, by_node[node][s])]
                out.append({"host": node, "slot": s, "status": "ok", "step_s": [times[min(r, len(times) - 1)]],
                            "params": None})
        return {"alone": out}

    saved = runs.alone, runs.keep_phases
    runs.alone, runs.keep_phases = alone, lambda *a: None
    try:
        gpus.throughput(v)
    finally:
        runs.alone, runs.keep_phases = saved
    status = {(c.host, by_node[c.host][c.gpu]): c.status for c in v.checks
              if c.check == "throughput" and c.gpu is not None}
    node_status = {c.node: c.status for c in v.checks if c.check == "throughput" and c.gpu is None}
    return {"status": status, "node_status": node_status, "drained": drain.hosts_of(drain.drain_list(v.checks)),
            "gpus": len(fleet),
            "rounds": v.figures.get("gpu_rounds"), "lines": v.figures.get("gpu_lines")}


def tally(fleet: dict[tuple[str, str], list[float]], got: dict[str, Any], named: tuple[str, ...]) -> dict[str, Any]:
    """Per 1,000 healthy GPUs WARNed and FAILed, per 1,000 healthy nodes drained (named), and the outliers caught:
    healthy is what outliers() does not call slow."""
    slow, slow_nodes = outliers(fleet)
    status = got["status"]
    healthy = [k for k in status if k not in slow and k[0] not in slow_nodes]
    nodes = {k[0] for k in status}
    healthy_nodes = {n for n in nodes if n not in slow_nodes and not any(k in slow for k in status if k[0] == n)}
    warn = sum(status[k] == "WARN" for k in healthy)
    fail = sum(status[k] == "FAIL" for k in healthy)
    drained_healthy = sorted(n for n in got["drained"] if n in healthy_nodes)
    real = [k for k in status if k in slow or k[0] in slow_nodes]
    whole = sorted(set(named) | (slow_nodes & nodes))
    caught = {n: got["node_status"].get(n, "-") for n in whole}
    flagged = sorted(f"{k[0]}/{k[1]} {status[k]}" for k in healthy if status[k] != "PASS")
    # A healthy node whose own row (judged as a whole node) is not PASS while none of its GPUs' rows is flagged.
    node_flagged = sorted(f"{n} {got['node_status'][n]}" for n in healthy_nodes if got["node_status"].get(n, "PASS")
                          != "PASS" and all(status[k] == "PASS" for k in status if k[0] == n))
    return {"gpus": len(status), "nodes": len(nodes), "rounds": got["rounds"],
            "healthy_warn_per_1000": 1000 * warn / max(1, len(healthy)),
            "healthy_fail_per_1000": 1000 * fail / max(1, len(healthy)),
            "healthy_nodes_drained_per_1000": 1000 * len(drained_healthy) / max(1, len(healthy_nodes)),
            "healthy_nodes_drained": drained_healthy, "healthy_flagged": flagged, "healthy_node_rows_flagged": node_flagged,
            "outlier_gpus": len(real), "outlier_gpus_flagged": sum(status[k] != "PASS" for k in real),
            "whole_nodes": caught, "named_drained": sorted(n for n in named if n in got["drained"])}
