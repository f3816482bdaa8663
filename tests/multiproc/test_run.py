"""`bench run` end to end: real DeepSpeed ranks on CPU with gloo."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from bench.core import results, synthetic
from tests.conftest import FAST, assert_bad_input, bench, one_json

pytestmark = pytest.mark.slow


def _run_ok(out_dir, *args, env=None):
    proc = bench("--gpus", "2", "--dataset", "synthetic", *FAST, "--out", out_dir, "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    return rec


def test_two_ranks_synthetic_json(out_dir, tmp_path):
    env = dict(os.environ, MY_API_TOKEN="sekrit-value", NCCL_DEBUG="WARN")
    prom = tmp_path / "vitbench.prom"
    rec = _run_ok(out_dir, "--steps", "30", "--metrics-file", str(prom), env=env)
    fig = rec["figures"]
    # The metrics file holds the record's figures, in the format node_exporter reads.
    from tests.metrics_check import parse, values
    got = parse(prom.read_text())
    assert values(got, "vitbench_images_per_second", run_id=rec["run_id"]) == [fig["images_per_s"]]
    assert sorted(values(got, "vitbench_rank_images_per_second", gpu_model="cpu")) == \
        sorted(fig["images_per_s_per_rank"])
    assert values(got, "vitbench_run_success") == [1.0]
    assert rec["status"] == "ok" and rec["kind"] == "run"
    assert fig["world_size"] == 2 and rec["plan"]["world_size"] == 2
    assert fig["images_per_s"] > 0 and len(fig["images_per_s_per_rank"]) == 2
    assert fig["sanity"]["loss_fell"] and fig["sanity"]["world_size_as_planned"]
    assert fig["loss"]["last"] < fig["loss"]["first"]
    assert fig["test_acc"] is not None and fig["test_acc"] > 0.2  # 10 classes: chance is 0.1
    assert fig["warmup"]["steps"] == 5 and len(fig["loss"]["curve"]) == 30
    # The record on disk is the one printed, and the run dir holds what it promises.
    run_dir = rec["run_dir"]
    on_disk = results.read(os.path.join(run_dir, "results.jsonl")).records
    assert on_disk == [rec]
    for name in ("config.json", "ds_config.json", "logs/rank0.log", "logs/rank1.log"):
        assert os.path.isfile(os.path.join(run_dir, name)), name
    with open(os.path.join(run_dir, "ds_config.json")) as f:
        assert json.load(f)["train_batch_size"] == 32
    assert {d["rank"] for d in rec["provenance"]["devices"]} == {0, 1}
    # The inventory and the verdict travel in every record.
    assert rec["inventory"][0]["host"] == "localhost" and rec["verdict"]["level"] == "ok"
    # The environment is recorded through an allowlist: NCCL_* yes, tokens never.
    assert rec["provenance"]["env"]["NCCL_DEBUG"] == "WARN"
    assert "sekrit-value" not in json.dumps(rec)


# What the engine's ZeRO optimizer object itself holds (bench.worker.engines.settings), not what ds_config.json
# asked for: stage 1-2's DeepSpeedZeroOptimizer keeps overlap_comm and cpu_offload, stage 3's its offload flags.
# Stages 1 and 3 at their defaults are checked on the zero sweep's own runs (test_zero_figures.py).
# Both options in one run: each is read off the engine on its own key.
ENGINE = {
    (2, ("--overlap-comm", "--offload")): {"optimizer": "DeepSpeedZeroOptimizer", "overlap_comm": True,
                                           "cpu_offload": True, "partition_gradients": True},
}


@pytest.mark.parametrize("stage,extra", list(ENGINE))
def test_zero_stages(out_dir, stage, extra):
    rec = _run_ok(out_dir, "--steps", "8", "--timing-warmup", "2", "--zero-stage", str(stage), *extra, "--no-eval")
    with open(os.path.join(rec["run_dir"], "ds_config.json")) as f:
        assert json.load(f)["zero_optimization"]["stage"] == stage
    got = rec["figures"]["engine_settings"]
    assert got["zero_stage"] == stage
    assert {k: got.get(k) for k in ENGINE[(stage, extra)]} == ENGINE[(stage, extra)], got


def test_a_loss_that_is_no_longer_finite_fails_the_run_naming_the_step(out_dir):
    # An ok record cannot hold a non-finite loss: the loop stops at the step where it appears (AdamW at this
    # learning rate sends the weights, then the logits, past float32's range within a few steps).
    proc = bench("--gpus", "2", "--dataset", "synthetic", *FAST, "--steps", "8", "--timing-warmup", "1",
                 "--lr", "1e30", "--no-eval", "--out", out_dir, "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "failed" and "figures" not in rec
    text = rec["error"]["reason"] + "".join(rec["error"].get("log_tail") or [])
    assert "loss is nan at step" in text or "loss is inf at step" in text, rec["error"]


def test_bf16_on_cpu(out_dir):
    rec = _run_ok(out_dir, "--steps", "8", "--timing-warmup", "2", "--precision", "bf16", "--no-eval")
    with open(os.path.join(rec["run_dir"], "ds_config.json")) as f:
        assert json.load(f)["bf16"] == {"enabled": True}


def test_fp16_on_cpu_is_refused_in_one_line(out_dir):
    proc = bench("--gpus", "2", "--dataset", "synthetic", "--precision", "fp16", "--out", out_dir)
    assert_bad_input(proc, "--precision fp16")
    assert not os.path.exists(out_dir)  # nothing launched, no run dir


def test_real_cifar10_format(tmp_path, out_dir):
    data = str(tmp_path / "data")
    synthetic.write_cifar(data, "cifar10", n_train=320, n_test=64, seed=1)
    proc = bench("--gpus", "2", "--dataset", "cifar10", "--data-dir", data, "--model", "vit-micro-p4-32",
                 "--micro-batch", "16", "--epochs", "1", "--timing-warmup", "2", "--out", out_dir, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    fig = rec["figures"]
    # 320 images over 2 ranks of 16: 10 steps make one epoch, and the whole test set is counted once.
    assert fig["steps_per_epoch"] == 10 and fig["total_steps"] == 10
    # One whole epoch ran: its wall clock is measured, and holds at least the steady steps it contains.
    assert fig["epoch_s_estimated"] is False and len(fig["epoch_wall_s"]) == 1
    steady = fig["total_steps"] - fig["warmup"]["steps"]
    assert fig["epoch_s"] >= max(r["step_s_mean"] for r in fig["ranks"]) * steady > 0
    with open(os.path.join(rec["run_dir"], "summary.json")) as f:
        summary = json.load(f)
    assert summary["num_classes"] == 10 and summary["test"]["seen"] == 64


def test_failing_rank_is_named_with_its_log(tmp_path, out_dir):
    user = tmp_path / "ds.json"
    user.write_text(json.dumps({"optimizer": {"type": "NoSuchOptimizer", "params": {}}}))
    proc = bench("--gpus", "2", "--dataset", "synthetic", *FAST, "--steps", "6", "--out", out_dir, "--json",
                 "--deepspeed-config", str(user))
    assert proc.returncode == 1, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "failed"
    assert rec["error"]["rank"] in (0, 1) and rec["error"]["log_tail"]
    assert "NoSuchOptimizer" in rec["error"]["reason"] + "".join(rec["error"]["log_tail"])
    # bench compare names this run by the content of its DeepSpeed JSON, a failed one too
    assert rec["deepspeed_config_sha256"] == hashlib.sha256(user.read_bytes()).hexdigest()
