"""Issue 53's table at 1,000 nodes x 8 GPUs in leaves of 32: fabric faults as real fabrics have them, each judged by
bench's own inter-node check and fabric rows over ten seeds at quick and three at full (FULL_SEEDS;
tests/scale_fixtures.py's judge_only: every look answered from the fabric model, pair figures faked, everything
else bench's), right in 9 of 10 at least
(the spine rows: no healthy node drained in any seed); and a healthy cluster at look noise 0.30 and at NCCL's, 20
seeds at quick and 6 at full: nothing drained, at most one WARN per 1,000 nodes.

What each row holds for "right": the nodes the fault should hold (WARN, never FAIL) and the fabric row that should
name it; no node outside those WARNs or FAILs."""

from __future__ import annotations

import os

import pytest

from tests import scale_fixtures as sf

NODES = 1000
# Seeds per row and level: the issue's 10 at quick (a judge call 0.07-0.12 s); at full (0.22-0.36 s a call) the
# suite looks at 3, which keeps the file near 45 s of the suite's 30 minutes. All 10 at full, as the branch that
# built the judge ran them (10 of 10 right in every row):
#     VITBENCH_TABLE_SEEDS=10 pytest tests/unit/test_fabric_table.py
QUICK_SEEDS = 10
FULL_SEEDS = int(os.environ.get("VITBENCH_TABLE_SEEDS", "3"))


def _seeds(level: str) -> int:
    return QUICK_SEEDS if level == "quick" else FULL_SEEDS
LEAF = 7                                   # node0224-node0255; its uplink 1 serves node0232-node0239
UP1 = [sf.host(i) for i in range(232, 240)]
UP12 = [sf.host(i) for i in range(232, 248)]
LEAF7 = [sf.host(i) for i in range(224, 256)]
ODD = [sf.host(i) for i in range(NODES) if (i // 32) % 2]
FIRST20 = [sf.host(i) for i in range(20 * 32)]
TOWARDS = sf.host(100)                     # on leaf03
LEAF12 = [sf.host(i) for i in range(12 * 32, 13 * 32)]


def _outcome(v) -> tuple[set[str], set[str], dict[str, tuple[str, str]], set[frozenset[str]]]:
    """(nodes drained: a FAIL row, nodes WARNed or held, {fabric row: (status, reason)} of rows that did not pass,
    the pairs measured)."""
    drained = {c.host for c in v.checks if c.host is not None and c.status == "FAIL"}
    warned = {c.host for c in v.checks if c.host is not None and c.status == "WARN"} - drained
    parts = {c.node: (c.status, c.reason) for c in v.checks
             if c.check == "fabric" and c.host is None and c.status not in ("PASS", "SKIP")}
    measured = {frozenset(c.node.split("+")) for c in v.checks if c.check == "inter-node" and "+" in c.node}
    return drained, warned, parts, measured


def _met(m: set[frozenset[str]], host: str, leaf: list[str], most: int = 1) -> bool:
    """Whether `host` was measured with at least `most` nodes of `leaf`."""
    return sum(frozenset((host, h)) in m for h in leaf) >= most


def _towards(d, w, p, m) -> bool:
    """node0100 slow only towards leaf12: never drained, nothing else raised; seen where two of its pairs meet
    leaf12 (one pair's looks cannot tell its end from the other's): the path leaf03-leaf12 named, and the node."""
    if d or w - {TOWARDS} or set(p) - {"leaf03-leaf12"}:
        return False
    if not _met(m, TOWARDS, LEAF12, 2):
        return True
    return _named(p, "leaf03-leaf12", f"{TOWARDS}'s way towards leaf12") or w == {TOWARDS}


def _named(parts: dict, row: str, text: str) -> bool:
    return row in parts and parts[row][0] in ("WARN", "FAIL") and text in parts[row][1]


ROWS = {
    # fault: (the fabric, judge_only's options, right(drained, warned, parts))
    "one of leaf07's 4 uplinks at 50%": (
        sf.Fabric(port={(LEAF, 1): 0.5}), {},
        lambda d, w, p, m: not d and w == set(UP1) and set(p) == {"leaf07"}
        and _named(p, "leaf07", "8 of its 32 nodes")),
    "two of leaf07's 4 uplinks at 50%": (
        sf.Fabric(port={(LEAF, 1): 0.5, (LEAF, 2): 0.5}), {},
        lambda d, w, p, m: not d and w == set(UP12) and set(p) == {"leaf07"} and _named(p, "leaf07", "16 of its 32")),
    "one of 2 spines at 50%": (
        sf.Fabric(spines=2, spine={1: 0.5}), {},
        lambda d, w, p, m: not d and not w and set(p) == {"cluster"} and _named(p, "cluster", "the fabric above")),
    "one of 4 spines at 50%": (
        sf.Fabric(spines=4, spine={1: 0.5}), {},
        lambda d, w, p, m: not d and not w and set(p) == {"cluster"} and _named(p, "cluster", "the fabric above")),
    "16 of 32 leaves' uplinks at 50%": (
        sf.Fabric(uplink={k: 0.5 for k in range(1, 32, 2)}), {},
        lambda d, w, p, m: not d and w == set(ODD) and set(p) == {f"leaf{k:02d}" for k in range(1, 32, 2)}),
    "20 of 32 leaves' uplinks at 50%": (
        sf.Fabric(uplink={k: 0.5 for k in range(20)}), {},
        lambda d, w, p, m: not d and w == set(FIRST20) and set(p) == {f"leaf{k:02d}" for k in range(20)}),
    "the leaf03-leaf12 path at 50%": (
        sf.Fabric(path={(3, 12): 0.5}), {},
        lambda d, w, p, m: not d and not w and set(p) == {"leaf03-leaf12"}
        and _named(p, "leaf03-leaf12", "the path between them")),
    "node0100 slow only towards leaf12": (sf.Fabric(towards={TOWARDS: (12, 0.5)}), {}, _towards),
    "no topology, leaf07's uplinks at 50%": (
        sf.Fabric(uplink={LEAF: 0.5}), {"topology": False},
        lambda d, w, p, m: not d and len(w) >= 28 and w <= set(LEAF7)),
    "a 2:1 fabric, --oversubscription 2": (
        sf.Fabric(oversub=0.5), {"oversubscription": 2},
        lambda d, w, p, m: not d and not w and not p),
    "16 of 32 leaves' uplinks at 50%, --oversubscription 1": (
        sf.Fabric(uplink={k: 0.5 for k in range(1, 32, 2)}), {"oversubscription": 1},
        lambda d, w, p, m: not d and w == set(ODD) and set(p) == {f"leaf{k:02d}" for k in range(1, 32, 2)}),
    # Without the design every pair across leaves at half is a 2:1 fabric (healthy); with it every leaf is named:
    # slow, or (its every pair across leaves with a slow leaf) not to be told apart.
    "every leaf's uplinks at 50%, --oversubscription 1": (
        sf.Fabric(uplink={k: 0.5 for k in range(32)}), {"oversubscription": 1},
        lambda d, w, p, m: not d and set(p) == {f"leaf{k:02d}" for k in range(32)} and len(w) >= 28 * 32),
    "node0230 unplaced, a 2:1 fabric": (
        sf.Fabric(oversub=0.5), {"unplaced": ("node0230",)},
        lambda d, w, p, m: not d and not w and not p),
    "node0230 unplaced, leaf07's uplinks at 50%": (
        sf.Fabric(uplink={LEAF: 0.5}), {"unplaced": ("node0230",)},
        lambda d, w, p, m: not d and w == set(LEAF7) and set(p) == {"leaf07"}),
}
SPINES = ("one of 2 spines at 50%", "one of 4 spines at 50%")
# Rows judged at one level only (the suite's time): the node towards leaf12 meets it twice only at full; the
# design's rows that repeat a row above with the option, at quick.
ONLY = {"node0100 slow only towards leaf12": "full", "a 2:1 fabric, --oversubscription 2": "quick",
        "16 of 32 leaves' uplinks at 50%, --oversubscription 1": "quick"}


@pytest.mark.parametrize("row, level", [(r, lv) for r in ROWS for lv in ("quick", "full") if ONLY.get(r, lv) == lv])
def test_the_issues_table(row, level):
    fabric, options, right = ROWS[row]
    wrong, seeds = [], _seeds(level)
    for seed in range(seeds):
        drained, warned, parts, measured = _outcome(sf.judge_only(fabric, NODES, seed, level, **options))
        if not right(drained, warned, parts, measured):
            wrong.append((seed, sorted(drained)[:5], len(warned), sorted(warned)[:5],
                          {k: (s, r[:120]) for k, (s, r) in list(parts.items())[:3]}))
        if row in SPINES:
            assert not drained, (seed, sorted(drained))
    assert len(wrong) <= seeds // 10, wrong


@pytest.mark.parametrize("level", ["quick", "full"])
@pytest.mark.parametrize("noise", [sf.LOOK_NOISE_HERE, sf.LOOK_NOISE_NCCL])
def test_a_healthy_cluster_drains_nothing_and_warns_at_most_one_node_in_a_thousand(noise, level):
    for seed in range(2 * _seeds(level)):
        drained, warned, parts, _ = _outcome(sf.judge_only(sf.Fabric(noise=noise), NODES, seed, level))
        assert not drained and len(warned) <= NODES // 1000 and not parts, (seed, sorted(drained), sorted(warned),
                                                                             parts)
