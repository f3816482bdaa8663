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
            "hosts": ["n1"], "measured": {}, "drain": [], "exclude": "", "level": "prolog"}
    return {**base, **kw}


def test_the_summary_names_each_checks_worst_row_by_status_then_lowest_figure():
    rows = [_row("throughput", "n1:0", "PASS", "n1", 0, figure=100.0), _row("throughput", "n1:1", "PASS", "n1", 1,
                                                                            figure=80.0),
            _row("throughput", "n2:0", "SKIP", "n2", 0), _row("numerics", "n1:0", "FAIL", "n1", 0),
            _row("numerics", "n1:1", "PASS", "n1", 1)]
    got = {s["check"]: s for s in summary(_rec(rows))}
    assert got["throughput"]["worst"]["node"] == "n1:1" and got["throughput"]["status"] == "PASS"
    assert got["throughput"]["counts"] == {"PASS": 2, "WARN": 0, "FAIL": 0, "ERROR": 0, "SKIP": 1}
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


def test_a_gpu_inside_the_published_tolerance_still_warns_when_it_is_the_slow_one_of_its_kind():
    from bench.analysis.references import Relative
    from bench.validate.gpus import judge_both

    tol = Relative(warn_lower=-0.35, fail_lower=-0.65)
    published = (50.0, -0.3, None, "50 img/s (GPU A, fp32)", "a paper")
    status, ref, reason = judge_both(60.0, published, [100.0, 100.0, 60.0], tol, lambda m: f"{m:g} img/s")
    assert status == "WARN" and ref == "50 img/s (GPU A, fp32); median of 3 100 img/s"
    assert "+20% from the published figure" in reason and "-40% from the median of its model" in reason
    assert judge_both(60.0, published, [60.0], tol, str)[0] == "PASS"       # alone: the published figure only
    assert judge_both(10.0, None, [100.0, 100.0, 10.0], tol, str)[0] == "FAIL"
    assert judge_both(60.0, None, [60.0], tol, str) is None                  # nothing to judge it against


def _round(k: int, rows: list[tuple[str, str, str, float | None, str | None, int | None]]) -> dict:
    return {"soak": {"round": k}, "checks": [{"check": c, "node": n, "status": s, "figure": f, "host": h, "gpu": g}
                                             for c, n, s, f, h, g in rows]}


def test_a_soak_names_the_round_a_gpu_went_bad_and_stayed_bad():
    from bench.analysis.soak import since, subjects, summarise

    rounds = [_round(1, [("throughput", "n1:0", "PASS", 100.0, "n1", 0), ("throughput", "n2:0", "PASS", 98.0, "n2", 0),
                         ("throughput", "n2", "PASS", 98.0, None, None)]),           # a node's summary row: not tracked
              _round(2, [("throughput", "n1:0", "PASS", 99.0, "n1", 0), ("throughput", "n2:0", "FAIL", 20.0, "n2", 0)]),
              _round(3, [("throughput", "n1:0", "WARN", 60.0, "n1", 0), ("throughput", "n2:0", "FAIL", 21.0, "n2", 0)]),
              _round(4, [("throughput", "n1:0", "PASS", 97.0, "n1", 0), ("throughput", "n2:0", "WARN", 30.0, "n2", 0)])]
    series = subjects(rounds)
    assert set(series) == {("throughput", "n1:0"), ("throughput", "n2:0")}
    bad, flaky = summarise(series)
    assert (bad.node, bad.since, bad.failed_rounds, bad.not_pass_rounds, bad.worst_round) == ("n2:0", 2, (2, 3),
                                                                                              (2, 3, 4), 2)
    assert bad.spread == pytest.approx((98 - 20) / 25.5) and bad.last_status == "WARN"
    assert (flaky.node, flaky.since, flaky.not_pass_rounds, flaky.worst_round) == ("n1:0", None, (3,), 3)
    assert since([(1, "FAIL"), (2, "PASS"), (3, "WARN"), (4, "FAIL")]) == 3 and since([(1, "PASS")]) is None


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("45", 45)])
def test_soak_durations(text, seconds):
    from bench.validate.soak import parse_duration

    assert parse_duration(text) == seconds


def test_soak_durations_that_are_not_are_one_line(tmp_path):
    from tests.conftest import assert_bad_input, cli

    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n")
    assert_bad_input(cli("validate", "--hostfile", str(hf), "--soak", "2 hours"), "--soak", "'2 hours'")
    assert_bad_input(cli("validate", "--hostfile", str(hf), "--soak-keep-going"), "--soak-keep-going")


def test_the_users_curve_decides_and_the_shipped_one_warns_where_every_peer_agrees_against_it():
    ref = {"platform": {"device": "GPU A", "torch": "2.14"}, "spec": SPEC, "losses": [2.0, 1.5, 1.2],
           "params_sha256": "d", "source": "somewhere"}
    agree = [_rank("a:0", GOOD), _rank("a:1", GOOD)]
    trusted = numerics.judge(agree, SPEC, [ref], trusted=True)
    assert [v.status for v in trusted] == ["FAIL", "FAIL"] and all(v.first_step == 2 for v in trusted)
    shipped = numerics.judge(agree, SPEC, [ref], trusted=False)
    assert [v.status for v in shipped] == ["WARN", "WARN"] and "may not fit this machine" in shipped[0].reason
    # An outvoted GPU still FAILs against the shipped curve; one alone only WARNs (nothing tells who is off).
    three = [_rank("a:0", GOOD), _rank("a:1", GOOD), _rank("b:0", [2.0, 1.5, 1.3], "x")]
    assert [v.status for v in numerics.judge(three, SPEC, [ref], trusted=False)] == ["WARN", "WARN", "FAIL"]
    assert [v.status for v in numerics.judge([_rank("a:0", GOOD)], SPEC, [ref], trusted=False)] == ["WARN"]
    matching = [_rank("a:0", ref["losses"]), _rank("a:1", ref["losses"])]
    assert {v.judged_by for v in numerics.judge(matching, SPEC, [ref], trusted=False)} == {"reference"}


# --------------------------------------------------------------------------- intra-node: one second look
def _intra(monkeypatch, looks: list[dict[str, tuple[float, int]]], checks=("intra-node",)):
    """intra_node over three 2-GPU CPU nodes, the comm launches answering `looks` in turn (busbw B/s, #wrong per
    node): what a real `bench comm` launch returns, given by hand so the rule can be read off (the launch itself
    runs in tests/multihost/test_validate.py)."""
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import links, runs
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    hosts = ["n1", "n2", "n3"]
    v = Validation(ValidateConfig(checks=checks), HostSelection(), {h: [0, 1] for h in hosts}, references.load(),
                   "/nonexistent")
    asked = []

    def comm(v_, resources, groups, names, rounds, sizes, tag, with_numerics=False):
        asked.append((tag, names))
        answer = looks[len(asked) - 1]
        return {"rows": [{"group": h, "busbw": answer[h][0], "wrong": answer[h][1]} for h in names]}

    monkeypatch.setattr(runs, "comm", comm)
    links.intra_node(v)
    return {c.node: c for c in v.checks if c.check == "intra-node"}, asked, v


def test_a_node_slow_in_one_look_is_looked_at_again_and_keeps_its_faster(monkeypatch):
    rows, asked, v = _intra(monkeypatch, [{"n1": (100e6, 0), "n2": (40e6, 0), "n3": (110e6, 0)},
                                          {"n1": (90e6, 0), "n2": (95e6, 0), "n3": (105e6, 0)}])
    assert [tag for tag, _ in asked] == ["intra-node", "intra-node-again"]
    assert {n: c.status for n, c in rows.items()} == dict.fromkeys(("n1", "n2", "n3"), "PASS")
    assert v.figures["intra_busbw"] == {"n1": 100e6, "n2": 95e6, "n3": 110e6}
    assert all("faster of 2 looks" in c.value for c in rows.values())


def test_a_node_slow_in_both_looks_is_judged_slow_and_a_wrong_value_in_either_fails(monkeypatch):
    rows, asked, _ = _intra(monkeypatch, [{"n1": (100e6, 0), "n2": (30e6, 0), "n3": (110e6, 1)},
                                          {"n1": (100e6, 0), "n2": (35e6, 0), "n3": (110e6, 0)}])
    assert len(asked) == 2
    assert rows["n2"].status in ("WARN", "FAIL") and rows["n2"].figure == 35e6, rows["n2"]
    assert rows["n3"].status == "FAIL" and "1 wrong value" in rows["n3"].reason, rows["n3"]
    assert rows["n1"].status == "PASS"


def test_nodes_that_all_pass_are_measured_once(monkeypatch):
    rows, asked, _ = _intra(monkeypatch, [{"n1": (100e6, 0), "n2": (95e6, 0), "n3": (110e6, 0)}])
    assert [tag for tag, _ in asked] == ["intra-node"] and {c.status for c in rows.values()} == {"PASS"}
    assert not any("looks" in c.value for c in rows.values())


def test_both_link_checks_share_one_launch_and_the_pairs_are_judged_from_it(monkeypatch):
    """The intra-node check's launch also measures the inter-node check's pairs (the ranks start once)."""
    from bench.validate import pairs

    pair_bw = {"n1+n2": (50e6, 0), "n2+n3": (52e6, 0), "n3+n1": (51e6, 0), "all": (49e6, 0)}
    rows, asked, v = _intra(monkeypatch, [{"n1": (100e6, 0), "n2": (95e6, 0), "n3": (110e6, 0), **pair_bw}],
                            checks=("intra-node", "inter-node"))
    ((tag, names),) = asked
    assert tag == "links" and set(names) == {"n1", "n2", "n3", *pair_bw}
    assert {c.status for c in rows.values()} == {"PASS"}
    pairs.inter_node(v)
    assert len(asked) == 1, "the inter-node check launched again"
    got = {c.node: c.status for c in v.checks if c.check == "inter-node"}
    assert got == {"n1+n2": "PASS", "n2+n3": "PASS", "n3+n1": "PASS", "n1": "PASS", "n2": "PASS", "n3": "PASS",
                   "cluster": "PASS"}


# --------------------------------------------------------------------------- throughput: when a second round runs
def _throughput(monkeypatch, rounds: list[dict[str, list[float]]], launched: list | None = None):
    """gpus.throughput over three 2-GPU CPU nodes, each per-GPU launch answering the next of `rounds` ({"host:slot":
    its steady step times}), as a real launch's 'alone' records do (the launch runs in tests/multihost)."""
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import gpus, runs
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    v = Validation(ValidateConfig(), HostSelection(), {h: [0, 1] for h in ("n1", "n2", "n3")}, references.load(),
                   "/nonexistent")
    asked = []

    def alone(v_, resources, tag, steps=None, with_numerics=False, **kw):
        asked.append(tag)
        if launched is not None:
            launched.append(resources)
        got = {(k.split(":")[0], int(k.split(":")[1])): xs for k, xs in rounds[len(asked) - 1].items()}
        return {"alone": [{"host": h, "slot": s, "status": "ok", "step_s": xs, "params": 1000}
                          for (h, s), xs in got.items() if s in resources[h]]}

    monkeypatch.setattr(runs, "alone", alone)
    gpus.throughput(v)
    return asked, v


def _steps(mean: float, jitter: float, n: int = 20) -> list[float]:
    return [mean * (1 + jitter * (1 if i % 2 else -1)) for i in range(n)]


def test_a_gpu_that_costs_more_than_the_noise_line_is_measured_again(monkeypatch):
    slow = {f"n{i}:{s}": _steps(0.1, 0.01) for i in (1, 2, 3) for s in (0, 1)}
    slow["n2:1"] = _steps(0.3, 0.01)   # a third of its peers' speed, steps as steady as theirs
    asked, v = _throughput(monkeypatch, [slow, slow])
    assert asked == ["throughput", "throughput-repeat"] and v.figures["gpu_rounds"] == 2


def test_a_cost_within_the_noise_of_the_median_gpu_is_not_worth_a_second_launch(monkeypatch):
    # Every GPU's steps jitter by +-60% (a shared core): the slowest costs ~12%, under 3 standard errors of the
    # median GPU's mean (~40%), which the stragglers check would not call a straggler either.
    noisy = {f"n{i}:{s}": _steps(0.1, 0.6) for i in (1, 2, 3) for s in (0, 1)}
    noisy["n2:1"] = _steps(0.115, 0.6)
    asked, v = _throughput(monkeypatch, [noisy])
    assert asked == ["throughput"] and v.figures["gpu_rounds"] == 1


def test_the_second_round_measures_only_the_gpus_the_first_one_measured(monkeypatch):
    # n3:1 never started in the first round (no figure): it stays ERROR and is not waited for again; n2:1 is slow.
    first = {f"n{i}:{s}": _steps(0.1, 0.01) for i in (1, 2, 3) for s in (0, 1) if (i, s) != (3, 1)}
    first["n2:1"] = _steps(0.3, 0.01)
    launched: list = []
    asked, v = _throughput(monkeypatch, [first, first], launched)
    assert asked == ["throughput", "throughput-repeat"]
    assert launched == [{"n1": [0, 1], "n2": [0, 1], "n3": [0, 1]}, {"n1": [0, 1], "n2": [0, 1], "n3": [0]}]
    assert [c.status for c in v.checks if c.check == "throughput" and c.node == "n3:1"] == ["ERROR"]


def _stragglers(v):
    from bench.validate import scaling

    v.figures.update(node_busbw={}, dp={"world_size": 6})
    scaling.stragglers(v)
    return next(c for c in v.checks if c.check == "stragglers")


def test_a_gpu_its_own_row_passes_within_its_peers_noise_is_not_called_a_straggler(monkeypatch):
    # Six CPU ranks time-slicing two cores: GPUs spread by tens of percent; the slowest 35% below the median
    # (a healthy CI run's), inside 3 x their robust spread.
    spread = {"n1:0": 0.080, "n1:1": 0.086, "n2:0": 0.110, "n2:1": 0.070, "n3:0": 0.095, "n3:1": 0.132}
    _, v = _throughput(monkeypatch, [{k: _steps(t, 0.01) for k, t in spread.items()}] * 2)
    row = [c for c in v.checks if c.check == "throughput" and c.node == "n3:1"][0]
    assert row.status == "PASS", row
    s = _stragglers(v)
    assert s.status == "PASS" and "per-GPU noise line" in s.reference and "no straggler" in s.reason, s


def test_a_gpu_slower_than_its_peers_noise_is_still_a_straggler(monkeypatch):
    tight = {f"n{i}:{s}": _steps(0.1 * (1 + 0.01 * (i + s)), 0.01) for i in (1, 2, 3) for s in (0, 1)}
    tight["n3:1"] = _steps(0.2, 0.01)  # half its peers' speed
    _, v = _throughput(monkeypatch, [tight] * 2)
    s = _stragglers(v)
    assert s.status == "WARN" and "--exclude n3:1" in s.reason, s
