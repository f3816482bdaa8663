"""The DeepSpeed JSON generated from typed options, and the user merge."""

from __future__ import annotations

import json

import pytest

from bench.core import dsconfig
from bench.core.config import RunConfig
from bench.core.errors import BadInput


def test_defaults_are_the_study_optimizer_without_jit():
    ds = dsconfig.build(RunConfig(), world_size=4, total_steps=100)
    assert ds["train_micro_batch_size_per_gpu"] == 32 and ds["train_batch_size"] == 128
    opt = ds["optimizer"]
    assert opt["type"] == "AdamW" and opt["params"]["lr"] == 1e-4 and opt["params"]["torch_adam"] is True
    assert ds["zero_optimization"] == {"stage": 0}
    assert "fp16" not in ds and "bf16" not in ds and "scheduler" not in ds


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stage_overlap_and_buckets(stage):
    cfg = RunConfig(zero_stage=stage, overlap_comm=True, bucket_size=5_000_000)
    zero = dsconfig.build(cfg, 2, 10)["zero_optimization"]
    assert zero["stage"] == stage and zero["overlap_comm"] is True and zero["reduce_bucket_size"] == 5_000_000
    assert ("allgather_bucket_size" in zero) == (stage < 3)


def test_offload_keeps_torch_adamw():
    ds = dsconfig.build(RunConfig(zero_stage=2, offload="cpu", device="cpu"), 2, 10)
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert ds["zero_force_ds_cpu_optimizer"] is False


@pytest.mark.parametrize("precision,key", [("fp16", "fp16"), ("bf16", "bf16")])
def test_precision(precision, key):
    assert dsconfig.build(RunConfig(precision=precision), 1, 10)[key]["enabled"] is True


def test_schedules():
    cos = dsconfig.build(RunConfig(schedule="cosine", warmup_steps=10), 1, 200)["scheduler"]
    assert cos["type"] == "WarmupCosineLR" and cos["params"]["total_num_steps"] == 200
    assert cos["params"]["warmup_num_steps"] == 10
    warm = dsconfig.build(RunConfig(warmup_steps=5), 1, 200)["scheduler"]
    assert warm["type"] == "WarmupLR" and warm["params"]["warmup_max_lr"] == 1e-4


def test_user_json_merges_deeply_and_wins(tmp_path):
    user = tmp_path / "ds.json"
    user.write_text(json.dumps({"zero_optimization": {"stage": 1, "overlap_comm": True}, "steps_per_print": 7}))
    ds = dsconfig.build(RunConfig(zero_stage=1, deepspeed_config=str(user)), 2, 10)
    assert ds["zero_optimization"] == {"stage": 1, "overlap_comm": True}
    assert ds["steps_per_print"] == 7 and ds["optimizer"]["type"] == "AdamW"


@pytest.mark.parametrize("user_json,needle", [
    # bench's loop feeds --micro-batch images and counts --grad-accum micro steps: DeepSpeed must agree.
    ({"train_batch_size": 1000}, "train_batch_size is 1000 but bench's --micro-batch x --grad-accum x ranks gives 64"),
    ({"train_micro_batch_size_per_gpu": 8}, "train_micro_batch_size_per_gpu is 8 but bench's --micro-batch gives 32"),
    ({"gradient_accumulation_steps": 4}, "gradient_accumulation_steps is 4 but bench's --grad-accum gives 1"),
    # The figures (volume, memory formulas, MFU's peak) follow --zero-stage and --precision.
    ({"zero_optimization": {"stage": 2}}, "zero_optimization.stage is 2 but bench's --zero-stage gives 0"),
    ({"bf16": {"enabled": True}}, "bf16.enabled is True but bench's --precision gives False"),
    ({"zero_optimization": {"stage": 0}, "fp16": {"enabled": False}}, None),  # saying what bench says is fine
])
def test_user_json_that_disagrees_with_benchs_options_is_refused_naming_the_key(tmp_path, user_json, needle):
    user = tmp_path / "ds.json"
    user.write_text(json.dumps(user_json))
    if needle is None:
        dsconfig.build(RunConfig(deepspeed_config=str(user)), 2, 10)
        return
    with pytest.raises(BadInput) as e:
        dsconfig.build(RunConfig(deepspeed_config=str(user)), 2, 10)
    assert str(e.value) == f"{user}: {needle}; set it with {needle.split('bench' + chr(39) + 's ')[1].split()[0]} instead"


def test_overlap_comm_is_deepspeeds_default_unless_given_and_offload_works_from_stage_1():
    zero = {s: dsconfig.build(RunConfig(zero_stage=s), 2, 10)["zero_optimization"] for s in (1, 2, 3)}
    assert [zero[s]["overlap_comm"] for s in (1, 2, 3)] == [False, False, True]
    assert dsconfig.build(RunConfig(zero_stage=3, overlap_comm=False), 2, 10)["zero_optimization"][
        "overlap_comm"] is False
    off = dsconfig.build(RunConfig(zero_stage=1, offload="cpu"), 2, 10)["zero_optimization"]
    assert off["offload_optimizer"]["device"] == "cpu"
    with pytest.raises(BadInput, match="^--offload: optimizer offload needs ZeRO stage 1, 2 or 3, got stage 0$"):
        RunConfig(offload="cpu")


@pytest.mark.parametrize("text,needle", [
    ("[1, 2]", "must be a JSON object"),
    ('{"train_batch_size": -4}', "train_batch_size must be a positive integer"),
    ('{"zero_optimization": 3}', "zero_optimization must be an object"),
    ('{\n"a": 1,\n}', ":3:"),
])
def test_bad_user_json(tmp_path, text, needle):
    user = tmp_path / "ds.json"
    user.write_text(text)
    with pytest.raises(BadInput, match=needle):
        dsconfig.load_user(str(user))


def test_config_round_trips_through_json():
    cfg = RunConfig(zero_stage=2, precision="bf16", steps=7, timing_warmup=2)
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(BadInput, match="unknown key"):
        RunConfig.from_dict({**cfg.to_dict(), "bogus": 1})
