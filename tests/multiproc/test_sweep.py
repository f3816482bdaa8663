"""`bench sweep` end to end: real DeepSpeed (and DDP) ranks on CPU with gloo, 2 local ranks.

Every launch costs 10-20 s, so value lists are short; counts of launched
points are asserted, never times.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.core import results
from tests.conftest import REPO, SWEEP_POINT, assert_bad_input, bench, one_json

pytestmark = pytest.mark.slow

ENV = dict(os.environ)

COMMON = SWEEP_POINT


def sweep(out: str, suite: str, *extra: str):
    proc = bench("sweep", suite, *COMMON, "--out", out, "--json", *extra, env=ENV)
    return proc, (one_json(proc.stdout) if proc.stdout.strip() else None)


def records(sweep_dir: str) -> list[dict]:
    recs = results.read(os.path.join(sweep_dir, "results.jsonl")).records
    for r in recs:
        results.validate(r)
    return recs


def run_dirs(sweep_dir: str) -> list[str]:
    runs = os.path.join(sweep_dir, "runs")
    return sorted(os.listdir(runs)) if os.path.isdir(runs) else []


def check_complete(out: str, suite: str, summary: dict, expected_ids: list[str]) -> list[dict]:
    d = os.path.join(out, suite)
    assert summary["status"] == "ok", summary
    assert summary["launched"] == expected_ids and summary["skipped"] == []
    recs = records(d)
    assert [r["point_id"] for r in recs] == expected_ids
    assert all(r["kind"] == "point" and r["status"] == "ok" and r["suite"] == suite for r in recs)
    assert len(run_dirs(d)) == len(expected_ids)
    with open(os.path.join(d, "sweep.json")) as f:
        assert [p["id"] for p in json.load(f)["points"]] == expected_ids
    return recs


def test_batch_interrupted_then_resumed(tmp_path):
    out = str(tmp_path / "res")
    d = os.path.join(out, "batch")
    ids = ["batch/mb=8/gpus=2", "batch/mb=16/gpus=2"]
    argv = [sys.executable, "-m", "bench", "sweep", "batch", *COMMON, "--micro-batches", "8,16", "--gpu-counts", "2",
            "--out", out, "--json"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    path = os.path.join(d, "results.jsonl")
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(path) and records(d):
            break
        time.sleep(0.5)
    # Ctrl-C once the first point is recorded, while the second runs.
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    first = json.loads(stdout)
    assert first["status"] == "interrupted"
    kept = [r["point_id"] for r in records(d)]
    assert kept[:1] == ids[:1]
    dirs_after_interrupt = len(run_dirs(d))

    # The same command resumes: only what is not recorded runs.
    proc2, second = sweep(out, "batch", "--micro-batches", "8,16", "--gpu-counts", "2")
    assert proc2.returncode == 0, (proc2.stdout[-2000:], proc2.stderr[-2000:])
    assert second["skipped"] == kept and second["launched"] == [i for i in ids if i not in kept]
    assert sorted(r["point_id"] for r in records(d)) == sorted(ids)
    assert len(run_dirs(d)) == dirs_after_interrupt + len(second["launched"])

    # A finished sweep again launches nothing.
    proc3, third = sweep(out, "batch", "--micro-batches", "8,16", "--gpu-counts", "2")
    assert proc3.returncode == 0 and third["launched"] == [] and third["skipped"] == ids
    assert len(records(d)) == 2 and len(run_dirs(d)) == dirs_after_interrupt + len(second["launched"])
    recs = records(d)
    assert {r["config"]["micro_batch"] for r in recs} == {8, 16}
    assert {r["figures"]["world_size"] for r in recs} == {2}

    # Other options under the same name are refused before anything launches.
    assert_bad_input(bench("sweep", "batch", *COMMON, "--steps", "7", "--micro-batches", "8,16", "--gpu-counts", "2",
                           "--out", out, env=ENV), "was planned with steps=6, now 7")


def test_accum(tmp_path):
    out = str(tmp_path)
    proc, s = sweep(out, "accum", "--grad-accums", "2")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    (rec,) = check_complete(out, "accum", s, ["accum/accum=2/gpus=2"])
    assert rec["figures"]["global_batch"] == 64 and rec["config"]["micro_batch"] == 16


def test_strong_both_senses_and_report_plots(tmp_path):
    out = str(tmp_path / "res")
    proc, s = sweep(out, "strong")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    recs = check_complete(out, "strong", s, ["strong/fixed-global/gpus=1", "strong/fixed-global/gpus=2",
                                             "strong/study/gpus=1", "strong/study/gpus=2"])
    assert [r["config"]["micro_batch"] for r in recs] == [32, 16, 16, 16]
    assert [r["labels"]["sense"] for r in recs] == ["fixed-global"] * 2 + ["study"] * 2

    # The report reads the records only: it works on a copy without the run dirs.
    copy = tmp_path / "copied.jsonl"
    copy.write_text(open(os.path.join(out, "strong", "results.jsonl")).read())
    plots = tmp_path / "plots"
    rep = bench("report", str(copy), "--json", "--plots", str(plots), "--compare-paper")
    assert rep.returncode == 0, rep.stderr
    doc = one_json(rep.stdout)
    (g,) = doc["groups"]
    series = {x["series"]: x for x in g["scaling"]}
    assert set(series) == {"strong fixed-global", "strong study"}
    for x in series.values():
        p1, p2 = x["points"]
        assert p1["speedup"] == 1.0 and p2["speedup"] == p1["seconds"] / p2["seconds"]
    assert sorted(os.path.basename(p) for p in doc["plots"]) == ["strong-breakdown.png", "strong-scaling.png"]


def test_weak_share_grows(tmp_path):
    out = str(tmp_path)
    proc, s = sweep(out, "weak")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    recs = check_complete(out, "weak", s, ["weak/gpus=1", "weak/gpus=2"])
    assert [r["config"]["dataset_fraction"] for r in recs] == [0.1, 0.2]
    # Per-GPU work fixed: the same steps per epoch at 1 and 2 ranks.
    assert len({r["figures"]["steps_per_epoch"] for r in recs}) == 1


def test_zero(tmp_path):
    out = str(tmp_path)
    # One point: tests/multiproc/test_run.py runs every stage; this checks the suite's plumbing.
    proc, s = sweep(out, "zero", "--strategies", "2+offload", "--precisions", "bf16")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    (rec,) = check_complete(out, "zero", s, ["zero/stage=2+offload/bf16/gpus=2"])
    with open(os.path.join(rec["run_dir"], "ds_config.json")) as f:
        ds = json.load(f)
    assert ds["zero_optimization"]["stage"] == 2 and ds["bf16"] == {"enabled": True}
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


def test_ddp_baseline(ddp_sweep):
    out, proc = ddp_sweep  # the session's `bench sweep ddp` (tests/conftest.py): test_engines reads its points too
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    s = one_json(proc.stdout)
    recs = check_complete(out, "ddp", s, ["ddp/engine=deepspeed/gpus=2", "ddp/engine=ddp/gpus=2",
                                          "ddp/engine=fsdp2/gpus=2"])
    assert [r["config"]["engine"] for r in recs] == ["deepspeed", "ddp", "fsdp2"]
    ddp = recs[1]["figures"]
    assert ddp["sanity"]["loss_fell"] and ddp["sanity"]["world_size_as_planned"]
    # Both engines' collectives were counted (DeepSpeed's comms logger, DDP's communication hook): one gradient
    # all-reduce a step each, so both send the same bytes per step, and both times were measured.
    ds = recs[0]["figures"]
    assert ds["comm"]["bytes_per_step"] > 0 and ds["comm"]["seconds_per_step"] > 0
    assert ddp["comm"]["seconds_per_step"] > 0
    assert ddp["comm"]["bytes_per_step"] == pytest.approx(ds["comm"]["bytes_per_step"], rel=0.05)
    rep = one_json(bench("report", os.path.join(out, "ddp"), "--json").stdout)
    assert [r["comparison"] for r in rep["groups"][0]["ratios"]] == ["deepspeed over ddp", "fsdp2 over ddp"]


def test_placement_needs_two_hosts(tmp_path):
    assert_bad_input(bench("sweep", "placement", *COMMON, "--out", str(tmp_path)),
                     "placement: needs a --hostfile that selects >= 2 hosts")
