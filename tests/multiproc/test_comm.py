"""`bench comm` end to end: real gloo ranks on CPU, launched like `bench run`."""

from __future__ import annotations

import os

import pytest

from bench.core import results
from tests.conftest import assert_bad_input, bench, one_json
from tests.faults import corrupt_all_reduce

pytestmark = pytest.mark.slow

QUICK = ("--sizes", "1K,64K", "--iters", "5", "--timing-warmup", "2")


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
