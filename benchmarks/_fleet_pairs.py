"""The nccl-tests logs of ../shared/fixtures/fleets/nccl-tests-h100, read and replayed through bench's pair judge.

    figs = load("example-cluster01")                 # {(gpus per node, test): {(a, b): busbw B/s or None}}
    rec = replay(figs[(4, "sendrecv_perf")], 4, level="full", seed=1)   # bench's validate record

A log is one node pair at G GPUs per node (nccl_N2_G4_cnode2-002_cnode2-003.log)
and holds one or two tests (alltoall_perf, sendrecv_perf); a pair's figure
is its out-of-place busbw at the largest size the test ran (16 or 32 GiB),
in bytes/s; a test with no data line failed (failures.txt lists them):
None, replayed as a pair that moved nothing (0 B/s).

replay() runs bench.validate.pairs.inter_node itself, as the main branch
has it, on a Validation of those nodes (no topology: the logs give none;
each node the recorded H200 node of tests/scale_fixtures.py without its
NICs, which the logs do not name: no published figure, the pairs judged
against each other), with bench.validate.runs.comm answered from the
logs: every look at a pair is the pair's one figure (the logs measured
each pair once), the whole set's all-reduce the least pair figure. Then
stages.record: drains, the breaker, the exit status, all bench's own.
"""

from __future__ import annotations

import os
import re
from typing import Any

from benchmarks._fleet_gpus import FLEETS

H100_DIR = os.path.join(FLEETS, "nccl-tests-h100")
SETS = {"example-cluster01": "healthy, 10 nodes", "example-cluster00": "unhealthy, 17 nodes"}
_NAME = re.compile(r"nccl_N2_G(\d+)_(\S+?)_(\S+)\.log\Z")
_START = re.compile(r"# Collective test starting: (\S+)")
_DATA = re.compile(r"\s*(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s")


def _logs(folder: str) -> list[str]:
    out = []
    for root, _, files in os.walk(folder):
        if os.path.basename(root) == "logs" and "pairwise" in root:
            out += [os.path.join(root, f) for f in files if _NAME.match(f)]
    return sorted(out)


def load(name: str, folder: str = H100_DIR) -> dict[tuple[int, str], dict[tuple[str, str], float | None]]:
    out: dict[tuple[int, str], dict[tuple[str, str], float | None]] = {}
    for path in _logs(os.path.join(folder, name)):
        g, a, b = _NAME.match(os.path.basename(path)).groups()
        test, best = None, {}
        with open(path, errors="replace") as f:
            for line in f:
                if (m := _START.match(line)):
                    test = m.group(1)
                    best.setdefault(test, None)
                elif test and (m := _DATA.match(line)):
                    size, busbw = int(m.group(1)), float(m.group(2))
                    if best[test] is None or size >= best[test][0]:
                        best[test] = (size, busbw)
        for t, got in best.items():
            out.setdefault((int(g), t), {})[(a, b)] = got[1] * 1e9 if got else None
    return out


def replay(pairs: dict[tuple[str, str], float | None], gpus: int, level: str, seed: int) -> dict[str, Any]:
    """bench validate's record of the inter-node check over these nodes, at `gpus` GPUs per node."""
    import json

    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import config, pairs as pair_check, runs, stages
    from bench.validate.state import Validation
    from tests import scale_fixtures as sf

    hosts = sorted({h for p in pairs for h in p})
    fig = {frozenset(p): (x or 0.0) for p, x in pairs.items()}
    cfg = config.ValidateConfig(level=level, checks=("inter-node",), pairs_seed=seed)
    v = Validation(cfg, HostSelection(), {h: list(range(gpus)) for h in hosts}, references.load(), "/nonexistent")
    v.device = "cuda"
    node = json.loads(sf.node_template())
    node["interconnect"].pop("inter", None)  # the logs do not say the NICs: no published figure, peers alone
    v.inventory = {h: node for h in hosts}
    least = min((x for x in fig.values() if x), default=0.0)

    def comm(v_, resources, groups, names, rounds, sizes, tag, with_numerics=False, environ=None):
        rows = []
        for rnd in rounds:
            for gi in rnd:
                ends = names[gi].split("+")
                busbw = fig.get(frozenset(ends), least) if len(ends) == 2 else least
                rows.append({"group": names[gi], "wrong": 0, "busbw": busbw})
        return {"rows": rows}

    saved = runs.comm
    runs.comm = comm
    try:
        pair_check.inter_node(v)
    finally:
        runs.comm = saved
    return stages.record(v, "replay", 0.0)


SHORT = 0.5     # a pair below half the set's fast pairs (their 90th percentile) is short: the logs' short pairs
                # sit at 0.0-0.3x of those, the rest within 0.9-1.1x (half the pairs at 8 GPUs' alltoall are short)
ALPHA = 0.00135  # the judge's own rate (bench.analysis.peer_lines.ALPHA): a healthy node blamed this often, at most


def logs_blame(pairs: dict[tuple[str, str], float | None]) -> dict[str, Any]:
    """What the logs themselves blame, the reference the judge's replay is read against: {"nodes": {node: (short
    partners, partners, the chance of that many under the other pairs' rate)}, "links": [short pairs no blamed node
    explains], "known_good": {node: [its short partners whose every other pair is good]}}. A node is blamed when
    more of its pairs are short than the rest of the set's short pairs make likely: P(Binomial(partners, rate of
    short pairs among the pairs without it) >= its short ones) under ALPHA over the nodes (Bonferroni); the worst
    first, its pairs then set aside, until none is left. A short pair whose ends no such node explains is a link's
    (the path between the two)."""
    from math import comb

    figs = {frozenset(p): (x or 0.0) for p, x in pairs.items()}
    fast = sorted(figs.values())[int(0.9 * (len(figs) - 1))]
    short = {p for p, x in figs.items() if x < SHORT * fast}
    hosts = sorted({h for p in figs for h in p})
    left, blamed = dict(figs), {}
    while True:
        best = None
        for h in (h for h in hosts if h not in blamed):
            mine = [p for p in left if h in p]
            k = sum(p in short for p in mine)
            rest = [p for p in left if h not in p]
            rate = sum(p in short for p in rest) / max(1, len(rest))
            chance = sum(comb(len(mine), j) * rate ** j * (1 - rate) ** (len(mine) - j) for j in range(k, len(mine) + 1))
            if k and (best is None or chance < best[1]):
                best = (h, chance, k, len(mine))
        if best is None or best[1] >= ALPHA / len(hosts):
            break
        blamed[best[0]] = (best[2], best[3], best[1])
        left = {p: x for p, x in left.items() if best[0] not in p}
    good = {h: sorted(o for p in short if h in p for o in p - {h}
                      if not any(q in short for q in figs if o in q and q != p)) for h in blamed}
    links = sorted("+".join(sorted(p)) for p in short if not p & set(blamed))
    # Islands: the nodes the good pairs join (a short pair's ends in two of them: the path between the islands).
    island = {h: {h} for h in hosts if h not in blamed}
    for p in figs:
        if p not in short and not p & set(blamed) and len(p) == 2:
            a, b = sorted(p)
            if island[a] is not island[b]:
                merged = island[a] | island[b]
                for h in merged:
                    island[h] = merged
    islands = sorted({frozenset(x) for x in island.values()}, key=lambda x: (-len(x), sorted(x)))
    return {"nodes": blamed, "links": links, "known_good": good, "short": len(short), "pairs": len(figs),
            "islands": [sorted(x) for x in islands] if len(islands) > 1 else []}


def tally(rec: dict[str, Any]) -> dict[str, Any]:
    """What a person reads off the record: exit status, nodes WARN/FAIL, drained (and held), pair rows FAIL."""
    held = set((rec.get("held") or {}).get("held") or [])
    node_rows = [c for c in rec["checks"] if c["check"] == "inter-node" and c["host"]]
    pair_rows = [c for c in rec["checks"] if c["check"] == "inter-node" and "+" in c["node"]]
    drained = sorted({e["host"] for e in rec["drain"]} - held)
    return {"exit": rec["exit_status"], "nodes": len(rec["hosts"]),
            "warn": sorted(c["host"] for c in node_rows if c["status"] == "WARN"),
            "fail": sorted(c["host"] for c in node_rows if c["status"] == "FAIL"),
            "drained": drained, "held": sorted(held),
            "pairs_fail": sum(c["status"] == "FAIL" for c in pair_rows), "pairs": len(pair_rows)}
