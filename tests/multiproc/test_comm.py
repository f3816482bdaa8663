"""`bench comm` end to end: real gloo ranks on CPU, launched like `bench run`."""

from __future__ import annotations

import os

import pytest

from bench.core import results
from tests.conftest import assert_bad_input, bench, one_json
from tests.faults import corrupt_all_reduce

pytestmark = pytest.mark.slow

QUICK = ("--sizes", "1K,64K", "--iters", "5", "--warmup-iters", "2")


def test_all_reduce_busbw_is_the_hand_calculation_from_the_record(out_dir, tmp_path):
    prom = tmp_path / "comm.prom"
    proc = bench("comm", "--gpus", "2", *QUICK, "--out", out_dir, "--json", "--metrics-file", str(prom))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    from tests.metrics_check import parse, values
    got = parse(prom.read_text())
    for r in rec["rows"]:
        assert values(got, "vitbench_comm_busbw_bytes_per_second", size_bytes=str(r["size"]), op="all_reduce") \
            == [r["busbw"]]
    assert rec["kind"] == "comm" and rec["status"] == "ok" and rec["wrong"] == 0
    # torch 2.14.1 names a members-only group from its group counter: its gloo ranks make groups members-only
    assert rec["groups_made"]["how"] == "members" and "group counter" in rec["groups_made"]["why"]
    assert [r["size"] for r in rec["rows"]] == [1024, 65536]
    for r in rec["rows"]:
        assert r["wrong"] == 0 and r["iters"] == 5 and r["ranks"] == 2
        times = sorted(r["time_s"].values())
        median = r["time_s"]["median"]
        assert times[0] <= median <= times[-1]
        algbw = r["size"] / median            # all_reduce: S = the buffer
        assert r["algbw"] == pytest.approx(algbw)
        assert r["busbw"] == pytest.approx(algbw * 2 * (2 - 1) / 2)
    # The record printed is the one appended to the run's results.jsonl.
    assert results.read(os.path.join(rec["run_dir"], "results.jsonl")).records == [rec]
    assert rec["plan"]["world_size"] == 2 and {d["rank"] for d in rec["provenance"]["devices"]} == {0, 1}


def test_a_corrupted_buffer_is_counted_wrong(out_dir, tmp_path):
    # From outside bench: a sitecustomize on the ranks' path makes rank 1 send one wrong value in every
    # all_reduce, as a bad link or bad memory would (bench has no switch for it).
    (tmp_path / "sitecustomize.py").write_text(corrupt_all_reduce(1))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = bench("comm", "--gpus", "2", *QUICK, "--out", out_dir, "--json", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "failed" and "wrong value" in rec["error"]["reason"]
    # Rank 1 sent one wrong value: after the all-reduce both ranks hold it, at every size.
    assert [r["wrong"] for r in rec["rows"]] == [2, 2]


def test_bad_sizes_are_one_line(out_dir):
    assert_bad_input(bench("comm", "--sizes", "4X", "--out", out_dir), "--sizes")


def test_groups_of_a_round_at_once_a_repeated_group_and_a_member_with_no_group_before(out_dir):
    # bench comm's groups as bench validate gives them (no flag of bench comm's own): 4 gloo ranks. Round 1 measures
    # two disjoint groups at once, one of them unsorted, and in each a member that made a group in round 0 meets one
    # that made none: with torch's own count of groups made, they would name the group differently and wait for each
    # other until the timeout. Round 2 is round 0 again (validate's --repeats), round 3 the whole world.
    from bench.jobs.comm import measure

    groups, names = [[0, 1], [1, 2], [3, 0], [0, 1, 2, 3]], ["a", "b", "c", "all"]
    rounds = [[0], [1, 2], [0], [3]]
    rec = measure({"localhost": [0, 1, 2, 3]}, "local", "cpu", sizes=[1024], iters=3, warmup=1, out_root=out_dir,
                  groups=groups, group_names=names, rounds=rounds, timeout=120)
    assert rec["status"] == "ok", rec.get("error")
    results.validate(rec)
    assert [(r["round"], r["group"], r["ranks"], r["wrong"]) for r in rec["rows"]] == [
        (0, "a", 2, 0), (1, "b", 2, 0), (1, "c", 2, 0), (2, "a", 2, 0), (3, "all", 4, 0)]
