"""bench validate's pure parts after the measurements: pair rounds, bit-for-bit numerics, the drain list, the view."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from bench.analysis import metrics, numerics
from bench.render.validate import footer, one_line, summary
from bench.validate import drain, pairing
from bench.validate.state import Check


def _is_matching(rnd) -> bool:
    nodes = [x for p in rnd for x in p]
    return len(nodes) == len(set(nodes))


@pytest.mark.parametrize("n", range(2, 12))
def test_ring_pairs_cover_the_ring_in_two_or_three_rounds_of_disjoint_pairs(n):
    rounds = pairing.ring_rounds(n)
    assert {tuple(sorted(p)) for r in rounds for p in r} == {tuple(sorted((i, (i + 1) % n))) for i in range(n)}
    assert all(_is_matching(r) for r in rounds)
    assert len(rounds) == (1 if n == 2 else 2 if n % 2 == 0 else 3)


@pytest.mark.parametrize("n", range(2, 12))
def test_round_robin_is_every_pair_once_in_n_minus_one_rounds(n):
    rounds = pairing.round_robin(n)
    pairs = [tuple(sorted(p)) for r in rounds for p in r]
    assert sorted(pairs) == sorted(itertools.combinations(range(n), 2))
    assert all(_is_matching(r) for r in rounds)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def test_suspects_are_paired_with_two_different_good_nodes_in_disjoint_rounds():
    assert pairing.retest_rounds([1], [0, 2, 3]) == [[(1, 0)], [(1, 2)]]
    rounds = pairing.retest_rounds([1, 4], [0, 2])
    assert all(_is_matching(r) for r in rounds)
    partners = {s: {b for r in rounds for a, b in r if a == s} for s in (1, 4)}
    assert partners == {1: {0, 2}, 4: {0, 2}}
    assert pairing.retest_rounds([1], [0]) == [[(1, 0)]]  # one good node: the one it can be tried against
    assert pairing.retest_rounds([1], []) == []


def test_compute_line_is_the_busbw_at_which_the_all_reduce_takes_one_step():
    line = metrics.compute_line_busbw(1.8e6, 0.2, 4)
    assert metrics.allreduce_seconds(1.8e6, line, 4) == pytest.approx(0.2)
    assert line == pytest.approx(1.8e6 * 2 * 3 / 4 / 0.2)


def _rank(key: str, losses: list[float], digest: str = "d", device: str = "GPU A", wrong: int = 0) -> dict:
    return {"key": key, "stack": {"device": device, "torch": "2.14"}, "losses": losses, "params_sha256": digest,
            "matmul_exact": {"n": 8, "wrong": wrong, "rerun_equal": True}}


GOOD = [2.0, 1.5, 1.25]
SPEC = {"model": "m", "steps": 3}


def test_the_one_gpu_that_differs_fails_with_its_first_differing_step_and_its_peers():
    off = [2.0, 1.5000001, 1.25]
    got = {v.key: v for v in numerics.judge([_rank("a:0", GOOD), _rank("a:1", GOOD), _rank("b:0", off, "e")], SPEC)}
    assert [got[k].status for k in ("a:0", "a:1", "b:0")] == ["PASS", "PASS", "FAIL"]
    assert got["b:0"].first_step == 1 and set(got["b:0"].compared_with) == {"a:0", "a:1"}
    assert "from step 1" in got["b:0"].reason and "a:0" in got["b:0"].reason


def test_equal_losses_with_other_weights_differ_at_the_last_step():
    got = numerics.judge([_rank("a:0", GOOD), _rank("a:1", GOOD), _rank("b:0", GOOD, "other")], SPEC)
    bad = next(v for v in got if v.key == "b:0")
    assert bad.status == "FAIL" and bad.first_step == 2 and "parameters" in bad.reason


def test_without_a_majority_every_gpu_of_the_stack_fails_and_says_why():
    got = numerics.judge([_rank("a:0", GOOD), _rank("a:1", [2.0, 1.0, 0.5], "x")], SPEC)
    assert [v.status for v in got] == ["FAIL", "FAIL"] and all("no majority" in v.reason for v in got)


def test_a_lone_gpu_is_skipped_unless_a_reference_curve_fits_its_stack():
    lone = [_rank("a:0", GOOD), _rank("z:0", GOOD, device="GPU Z")]
    assert {v.key: v.status for v in numerics.judge(lone, SPEC)} == {"a:0": "SKIP", "z:0": "SKIP"}
    ref = {"platform": {"device": "GPU Z", "torch": "2.14"}, "spec": SPEC, "losses": [2.0, 1.5, 1.2],
           "params_sha256": "d", "source": "a known-good node"}
    got = {v.key: v for v in numerics.judge(lone, SPEC, [ref])}
    assert got["a:0"].status == "SKIP"                       # the reference is another stack's
    assert got["z:0"].status == "FAIL" and got["z:0"].first_step == 2 and got["z:0"].judged_by == "reference"
    other_job = dict(ref, spec={"model": "m", "steps": 4})
    assert {v.key: v.status for v in numerics.judge(lone, SPEC, [other_job])}["z:0"] == "SKIP"


def test_a_wrong_exact_matmul_fails_even_with_a_right_curve():
    got = numerics.judge([_rank("a:0", GOOD), _rank("a:1", GOOD, wrong=3)], SPEC)
    assert [v.status for v in got] == ["PASS", "FAIL"] and "3 wrong" in got[1].reason


def _row(check, node, status, host=None, gpu=None, reason="why", figure=None, value="v"):
    return Check(check, node, status, value, "ref", reason, 0.0, host, gpu, figure)


def test_the_drain_list_names_failed_nodes_and_gpus_and_the_exclude_keeps_the_rest():
    rows = [_row("throughput", "n1:1", "FAIL", "n1", 1), _row("numerics", "n1:1", "FAIL", "n1", 1),
            _row("throughput", "n1", "FAIL"),            # a node's summary row: its GPU rows drain
            _row("inter-node", "n2+n3", "FAIL"),         # a pair: its nodes' rows decide
            _row("inter-node", "n3", "FAIL", "n3"), _row("throughput", "n2:0", "WARN", "n2", 0),
            _row("training", "cluster", "FAIL")]
    entries = drain.drain_list(rows)
    assert [(e["host"], e["gpu"], e["check"]) for e in entries] == [
        ("n1", 1, "throughput"), ("n1", 1, "numerics"), ("n3", None, "inter-node")]
    assert drain.exclude_spec(entries) == "n3@n1:1"
    assert drain.hosts_of(entries) == ["n1", "n3"]
    assert drain.reason_of(entries, "n1") == "bench validate: throughput (GPU 1): why (+1 more failed check(s))"
    assert drain.drain_list([_row("throughput", "n1:0", "PASS", "n1", 0)]) == []


def test_scontrol_gets_an_argument_list_and_a_reason_slurm_can_hold():
    from bench.cluster.slurm import REASON_MAX, drain_argv

    argv = drain_argv("node3", "bench validate: numerics (GPU 0): differs\nfrom 4 GPUs; $(touch x)")
    assert argv[:4] == ["scontrol", "update", "NodeName=node3", "State=DRAIN"]
    assert argv[4] == "Reason=bench validate: numerics (GPU 0): differs from 4 GPUs; $(touch x)"
    long = drain_argv("n", "x" * 1000)[4]
    assert len(long) == len("Reason=") + REASON_MAX and long.endswith("...")


def _rec(checks, **kw) -> dict:
    rows = [dataclasses.asdict(c) for c in checks]
    base = {"checks": rows, "result": "FAIL" if any(r["status"] == "FAIL" for r in rows) else "PASS",
            "hosts": ["n1"], "measured": {}, "drain": [], "exclude": ""}
    return {**base, **kw}


def test_the_summary_names_each_checks_worst_row_by_status_then_lowest_figure():
    rows = [_row("throughput", "n1:0", "PASS", "n1", 0, figure=100.0), _row("throughput", "n1:1", "PASS", "n1", 1,
                                                                            figure=80.0),
            _row("throughput", "n2:0", "SKIP", "n2", 0), _row("numerics", "n1:0", "FAIL", "n1", 0),
            _row("numerics", "n1:1", "PASS", "n1", 1)]
    got = {s["check"]: s for s in summary(_rec(rows))}
    assert got["throughput"]["worst"]["node"] == "n1:1" and got["throughput"]["status"] == "PASS"
    assert got["throughput"]["counts"] == {"PASS": 2, "WARN": 0, "FAIL": 0, "SKIP": 1}
    assert got["numerics"]["worst"]["node"] == "n1:0" and got["numerics"]["status"] == "FAIL"


def test_the_footer_prints_an_exclude_only_for_a_named_straggler_or_a_drain():
    assert footer(_rec([], measured={"stragglers": [{"kind": "gpu", "host": "n1", "slot": 0, "cost": 0.02,
                                                     "exclude": "n1:0"}]})) == []
    named = {"kind": "gpu", "host": "n1", "slot": 0, "cost": 0.3, "exclude": "n1:0"}
    lines = [t for t, _ in footer(_rec([], measured={"straggler": named}))]
    assert lines == ["straggler: gpu n1:0 costs 30.0% of the cluster's throughput; to drop it: --exclude n1:0"]
    entries = [{"host": "n3", "gpu": None, "check": "inter-node", "reason": "slow"}]
    lines = [t for t, _ in footer(_rec([], drain=entries, exclude="n3"))]
    assert lines == ["drain: n3 (inter-node); to run without them: --exclude n3"]


def test_the_prolog_prints_one_line():
    ok = _rec([_row("numerics", "n1:0", "PASS", "n1", 0), _row("intra-node", "n1", "PASS", "n1")])
    assert one_line(ok) == "bench validate prolog: PASS: n1, 1 GPU(s)/rank(s): numerics, intra-node"
    bad = _rec([_row("numerics", "n1:0", "FAIL", "n1", 0, reason="differs from step 1")])
    assert one_line(bad) == "bench validate prolog: FAIL: numerics n1:0: differs from step 1"
