"""Issue 53, item 7: bench's per-GPU judge on real fleets (../shared/fixtures/fleets: recorded per-GPU job times
of V100 fleets, SOURCES.md there), replayed through bench.validate.gpus.throughput as benchmarks/fleet_replay.py
does: quick and full as a validate without --repeats runs them (quick's one round and the second it takes when
the first names a straggler; full's 3 where its first names a GPU or node), and --repeats 3 and 5 where the sets
hold that many runs. What every run of a set shows is the reference (benchmarks/_fleet_gpus.outliers). Main
flags 3.5 healthy GPUs in 1,000 at --repeats 3 and takes one round at full, where Frontera's three whole-node
stragglers only WARN; here 0.6, and full drains them. The whole replay takes about 4 s."""

from __future__ import annotations

import os

import pytest

from benchmarks import _fleet_gpus, _fleet_pairs

pytestmark = pytest.mark.skipif(not os.path.isdir(_fleet_gpus.GPU_DIR),
                                reason=f"the shared fleet fixtures are not at {_fleet_gpus.FLEETS} (BENCH_FLEETS)")

FRONTERA = _fleet_gpus.NAMED["frontera-resnet-agg.csv"]


# (level, --repeats): quick and full as a validate without --repeats runs them (quick: one round, a second where a
# GPU would be a straggler; full: its own 3 rounds where the first names a GPU or node), then --repeats 3 and 5.
WAYS = [("quick", 1), ("full", 1), ("quick", 3), ("quick", 5)]


@pytest.fixture(scope="module")
def replayed() -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for name in _fleet_gpus.SETS:
        fleet = _fleet_gpus.load(name)
        for level, k in WAYS:
            got = _fleet_gpus.replay(fleet, k, name, level)
            if got["gpus"]:
                out.setdefault((level, k), []).append({"set": name, **_fleet_gpus.tally(
                    fleet, got, _fleet_gpus.NAMED.get(name, ()))})
    return out


@pytest.mark.parametrize("way", WAYS)
def test_no_healthy_node_is_drained_nor_its_node_row_flagged(replayed, way):
    assert [n for r in replayed[way] for n in r["healthy_nodes_drained"] + r["healthy_node_rows_flagged"]] == []


@pytest.mark.parametrize("way", WAYS)
def test_healthy_gpus_are_flagged_at_most_2_in_1000(replayed, way):
    """Main at --repeats 3: 3.5 in 1,000 (6 of 1,720; its line took the rounds' noise as a normal's), here 0.6."""
    rows = replayed[way]
    healthy = sum(r["gpus"] - r["outlier_gpus"] for r in rows)
    flagged = [g for r in rows for g in r["healthy_flagged"]]
    assert healthy > 1000 and len(flagged) <= 2 * healthy / 1000, flagged


def test_the_named_whole_node_stragglers_are_named_by_one_round_and_frontera_s_drained_by_full_s_three(replayed):
    one = {r["set"]: r for r in replayed[("quick", 1)]}
    for name, nodes in _fleet_gpus.NAMED.items():
        rows = one[name]["whole_nodes"]
        assert all(rows[n] in ("WARN", "FAIL") for n in nodes), (name, rows)
    # One run cannot tell Frontera's (0.90-0.93 of the median in their first run): their node rows WARN. Three
    # runs can (0.87-0.89): FAIL, drained as whole nodes; full takes them (its first round names them).
    assert {one["frontera-resnet-agg.csv"]["whole_nodes"][n] for n in FRONTERA} == {"WARN"}
    for way in [("full", 1), ("quick", 3), ("quick", 5)]:
        frontera = next(r for r in replayed[way] if r["set"] == "frontera-resnet-agg.csv")
        assert {frontera["whole_nodes"][n] for n in FRONTERA} == {"FAIL"}, (way, frontera["whole_nodes"])
        assert set(frontera["named_drained"]) == set(FRONTERA)
    assert next(r for r in replayed[("full", 1)] if r["set"] == "frontera-resnet-agg.csv")["rounds"] == 3


def test_a_median_s_line_with_no_round_noise_is_3_spreads_its_stated_rate():
    """peer_lines.median_tail: rounds that never move leave the peers' spread alone, normal: the line where
    ALPHA = Phi(-3) of them fall is 3 of its standard deviations; a round noise that is bimodal (a GPU 11% slow
    in a third of its rounds, as Longhorn's ResNet rounds are) widens the line past a normal of its spread."""
    import math

    from bench.analysis import peer_lines

    steady = [[1.0, 1.0, 1.0]] * 50
    width, between, pool = peer_lines.median_tail(steady, 0.02)
    assert width == pytest.approx(3 * 0.02, rel=1e-3) and between == pytest.approx(0.02) and pool == 300
    bimodal = [[1.0 if (i + r) % 3 else 0.89 for r in range(3)] for i in range(60)] + [[1.0] * 3] * 60
    width, _, _ = peer_lines.median_tail(bimodal, 0.02)
    sd = math.sqrt(sum(math.log(x) ** 2 for g in bimodal for x in g) / 360)  # the rounds' own spread
    assert width > 3 * math.hypot(0.02, sd * math.sqrt(math.pi / 2) / math.sqrt(3))


def test_at_3_rounds_longhorn_s_stragglers_are_held_and_only_quick_s_healthy_flags_warn(replayed):
    """Longhorn's ResNet, 3 rounds. A vote of rounds WARNed 97 healthy GPUs in 1,000 (any round not PASS), the
    median against a normal's line 12.5 (c002-11, c004-11 twice, c008-2: two of three rounds in the slow mode).
    The median of 3 against its rounds' own noise flags no healthy GPU but passes c007-12 and c008-8, which quick's
    faster of the first two rounds FAILs: the third round moves a healthy node as far (c004-11 -9.7%). So at 3
    rounds a GPU quick's rule names on its first two is held (WARN), never drained on that alone: the three
    stragglers are held, and the healthy GPUs flagged are those quick flags (c002-11's), WARN."""
    fleet = _fleet_gpus.load("resnet-longhorn-agg.csv")
    named = _fleet_gpus.NAMED["resnet-longhorn-agg.csv"]
    quick = next(r for r in replayed[("quick", 1)] if r["set"] == "resnet-longhorn-agg.csv")
    for way in [("quick", 3), ("full", 1)]:
        t = next(r for r in replayed[way] if r["set"] == "resnet-longhorn-agg.csv")
        assert {t["whole_nodes"][n] for n in named} <= {"WARN", "FAIL"}, (way, t["whole_nodes"])
        assert t["healthy_flagged"] and all(g.endswith(" WARN") for g in t["healthy_flagged"]), t["healthy_flagged"]
        assert {g.split()[0] for g in t["healthy_flagged"]} <= {g.split()[0] for g in quick["healthy_flagged"]}
    # Without quick's rule the same median of 3 would pass two of the three: what the rule adds.
    from bench.validate import gpus
    saved = gpus._as_quick
    gpus._as_quick = lambda v, rounds: {}
    try:
        t = _fleet_gpus.tally(fleet, _fleet_gpus.replay(fleet, 3, "resnet"), named)
    finally:
        gpus._as_quick = saved
    assert t["healthy_flagged"] == [] and sorted(n for n in named if t["whole_nodes"][n] == "PASS") == \
        ["c007-12", "c008-8"]


def test_the_logs_blame_node003_at_4_gpus_and_no_node_elsewhere():
    """What the unhealthy logs themselves say (_fleet_pairs.logs_blame, the reference the pair replay is read
    against): at 4 GPUs per node node003 is short with 12 of 16 partners (alltoall; 11 of 15 sendrecv), two of them
    short with no one else, a chance of 2e-06 under the other pairs' rate: the node; at 1 and 8 GPUs no node is
    (short links; at 8 GPUs' alltoall two islands of 9 and 8 nodes); the healthy 10 nodes have no short pair."""
    sick = _fleet_pairs.load("example-cluster00")
    for (g, test), pairs in sick.items():
        blamed = _fleet_pairs.logs_blame(pairs)
        assert list(blamed["nodes"]) == (["cnode2-003"] if g == 4 else []), (g, test, blamed["nodes"])
        assert blamed["links"], (g, test)
        assert [len(i) for i in blamed["islands"]] == ([9, 8] if (g, test) == (8, "alltoall_perf") else [])
    k, n, chance = _fleet_pairs.logs_blame(sick[(4, "alltoall_perf")])["nodes"]["cnode2-003"]
    assert (k, n) == (12, 16) and chance < 1e-5
    assert {"cnode2-013", "cnode2-014"} <= set(_fleet_pairs.logs_blame(sick[(4, "alltoall_perf")])["known_good"][
        "cnode2-003"])
    for pairs in _fleet_pairs.load("example-cluster01").values():
        assert _fleet_pairs.logs_blame(pairs)["short"] == 0


def test_the_h100_logs_are_read_as_nccl_tests_wrote_them():
    """Every pair of both sets at every GPU count, and the 34 failed tests failures.txt lists, as failures."""
    healthy, sick = _fleet_pairs.load("example-cluster01"), _fleet_pairs.load("example-cluster00")
    assert sorted(healthy) == [(g, t) for g in (1, 2, 4, 8) for t in ("alltoall_perf", "sendrecv_perf")]
    assert {len(p) for p in healthy.values()} == {45} and all(x for p in healthy.values() for x in p.values())
    assert sum(x is None for p in sick.values() for x in p.values()) == 34


def test_frontera_s_stragglers_are_judged_as_whole_nodes():
    """peer_lines.whole_nodes over each GPU's median of its first 3 runs: the three nodes every GPU of which is
    slow FAIL as nodes, and no node with a GPU at or above the median GPU is named."""
    import statistics

    from bench.analysis import peer_lines

    fleet = _fleet_gpus.load("frontera-resnet-agg.csv")
    per_node: dict[str, list[float]] = {}
    for (node, _), times in fleet.items():
        per_node.setdefault(node, []).append(1 / statistics.median(times[:3]))
    lines, named = peer_lines.whole_nodes(per_node)
    assert lines is not None and lines.n == len(per_node)
    assert {n for n, (status, _) in named.items() if status == "FAIL"} == set(FRONTERA), named
    middle = statistics.median(x for xs in per_node.values() for x in xs)
    assert all(max(per_node[n]) < middle for n in named)


@pytest.mark.parametrize("times, repeats, status", [
    ([5.0, 1.0], 2, "WARN"),            # slow in 1 of 2: neither round outvotes the other
    ([5.0, 5.0, 1.0], 3, "FAIL"),       # the median and 2 of 3 rounds
    ([5.0, 1.0, 1.0], 3, "PASS"),       # one slow round of three: the median is the GPU's
    ([5.0, 5.0], 2, "FAIL"),            # slow in both
])
def test_a_gpu_s_rounds_at_repeats(times, repeats, status):
    """bench.validate.gpus.throughput over four made-up GPUs (one step time per round; no GPU here), the fourth
    slow in some rounds (tests/multihost/test_validate.py's one-slow-round case at 2)."""
    fleet = {("n1", "a"): [1.0] * 3, ("n2", "b"): [1.02, 1.01, 1.0], ("n3", "c"): [1.0, 1.01, 1.02],
             ("n4", "d"): times}
    assert _fleet_gpus.replay(fleet, repeats, "made up")["status"][("n4", "d")] == status


def test_the_h100_pair_logs_healthy_pass_and_unhealthy_never_pass_and_node003_is_drained():
    """The real nccl-tests logs through bench's pair judge (benchmarks/fleet_replay.py's replay): the 10 healthy
    nodes exit 0 at every GPU count, test and level; the 17 unhealthy ones never exit 0 at either level (int57's
    quick, a ring of 17 of the 136 pairs, exited 0 in 2-4 of 10 seeds at 1 and 8 GPUs per node: quick now measures
    every pair up to 48 nodes without a topology, bench.validate.pair_kind), and at 4 GPUs per node node003 (slow
    with 12 of its 16 partners; 013 and 014 short with it alone) is drained, as the logs say (int57 held it at full:
    its fast partners 002 and 006 are short with others, but fine with those node003 is short with: no shared
    path; bench.validate.pairs._together), and no other node is."""
    healthy, sick = _fleet_pairs.load("example-cluster01"), _fleet_pairs.load("example-cluster00")
    for (g, test), pairs in healthy.items():
        for level in ("quick", "full"):
            assert _fleet_pairs.tally(_fleet_pairs.replay(pairs, g, level, 1))["exit"] == 0, (g, test, level)
    for (g, test), pairs in sick.items():
        for level in ("quick", "full"):
            for seed in (1, 2, 3):
                t = _fleet_pairs.tally(_fleet_pairs.replay(pairs, g, level, seed))
                assert t["exit"] != 0, (g, test, level, seed, t)
                assert t["drained"] == (["cnode2-003"] if g == 4 else []), (g, test, level, seed, t)


def test_full_s_later_rounds_that_measure_nothing_leave_the_first_round_s_verdicts(monkeypatch):
    """full's repeats are second looks: where their launches fail (no figure at all), the first round's verdicts
    stand (the slow GPU FAILs, its peers PASS), not a round every GPU failed (which would WARN them all)."""
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import config, gpus, runs
    from bench.validate.state import Validation

    res = {f"n{i}": [0, 1] for i in range(4)}
    v = Validation(config.ValidateConfig(level="full", checks=("throughput",)), HostSelection(), res,
                   references.load(), "/nonexistent")
    v.device = "cuda"
    v.inventory = {n: {"gpus": [{"index": i, "name": "made up"} for i in s]} for n, s in res.items()}
    tags = []

    def alone(v_, resources, tag, steps=None, with_numerics=False, extras=False):
        tags.append(tag)
        if tag != "throughput":
            return {"alone": [], "error": {"where": "launch", "reason": "made up"}}
        return {"alone": [{"host": h, "slot": s, "status": "ok", "params": None,
                           "step_s": [2.0 if (h, s) == ("n3", 1) else 1.0 + 0.001 * s]}
                          for h, slots in resources.items() for s in slots]}

    monkeypatch.setattr(runs, "alone", alone)
    monkeypatch.setattr(runs, "keep_phases", lambda *a: None)
    gpus.throughput(v)
    assert tags == ["throughput", "throughput-r2", "throughput-r3"]
    rows = {(c.host, c.gpu): c.status for c in v.checks if c.check == "throughput" and c.gpu is not None}
    assert rows.pop(("n3", 1)) == "FAIL" and set(rows.values()) == {"PASS"}, rows


def test_one_slow_gpu_beside_a_healthy_one_is_that_gpu_s_fault_not_its_node_s():
    """Two GPUs a node: the median of two is their mean, so one GPU at 7% of its peers beside a healthy partner put
    the node's median 63% down, a whole-node FAIL of one GPU's fault (the suite's slow-GPU validate on CPU ranks,
    2026-12-07). A node is judged whole only where its fastest GPU is past the line too."""
    from bench.analysis import peer_lines

    per_node = {f"n{i}": [100.0, 100.0] for i in range(5)} | {"slow": [7.0, 99.0]}
    _, named = peer_lines.whole_nodes(per_node)
    assert named == {}, named
    per_node["slow"] = [7.0, 60.0]   # both GPUs slow: the node's fault
    _, named = peer_lines.whole_nodes(per_node)
    assert set(named) == {"slow"}, named


def test_without_a_topology_the_unhealthy_logs_islands_are_named_and_no_healthy_set_has_any():
    """bench.validate.islands on the logs' own pairs: at 8 GPUs' alltoall the 17 unhealthy nodes fall in islands of 9
    and 8 (the logs' own split), the 72 pairs between at about a quarter of the others; in no other set, healthy or
    not, do the pairs split along a cut (the healthy sendrecv's two modes, 7-11% apart, are not a cut)."""
    from bench.validate import islands

    found = {}
    for name in _fleet_pairs.SETS:
        for key, pairs in _fleet_pairs.load(name).items():
            got = islands.find({frozenset(p): x or 0.0 for p, x in pairs.items()})
            if got is not None:
                found[(name, *key)] = got
    assert set(found) == {("example-cluster00", 8, "alltoall_perf")}, set(found)
    groups, ratio, slow = found[("example-cluster00", 8, "alltoall_perf")]
    assert [len(g) for g in groups] == [9, 8] and slow == 72 and 0.2 < ratio < 0.3, (groups, ratio, slow)
    assert sorted(h[-3:] for h in groups[1]) == ["005", "007", "008", "010", "011", "013", "014", "015"]
