"""Speed options: what each puts into the DeepSpeed config (pure), and that DeepSpeed hands AdamW's on to torch."""

from __future__ import annotations

import pytest

from bench.core import dsconfig
from bench.core.config import RunConfig
from bench.core.errors import BadInput


def build(**kw) -> dict:
    return dsconfig.build(RunConfig(dataset="synthetic", **kw), 2, 50)


@pytest.mark.parametrize("impl,expected", [
    ("fused", {"fused": True}), ("foreach", {"foreach": True}), ("forloop", {"foreach": False})])
def test_adamw_implementation_reaches_the_optimizer_params(impl, expected):
    params = build(adamw=impl)["optimizer"]["params"]
    assert params["torch_adam"] is True  # torch's AdamW, not DeepSpeed's JIT-built one
    assert {k: params[k] for k in ("fused", "foreach") if k in params} == expected


def test_fused_adamw_is_the_default():
    assert build()["optimizer"]["params"]["fused"] is True


def test_unknown_adamw_is_bad_input_naming_the_option():
    with pytest.raises(BadInput, match="--adamw"):
        RunConfig(adamw="apex")
    with pytest.raises(BadInput, match="--adamw"):
        dsconfig.adamw_impl("apex")


@pytest.mark.parametrize("precision,section", [("fp16", "fp16"), ("bf16", "bf16")])
def test_precision_sections(precision, section):
    ds = build(precision=precision)
    assert ds[section]["enabled"] is True
    assert ({"fp16", "bf16"} - {section}).isdisjoint(ds)


def test_fp32_has_no_reduced_precision_section():
    ds = build()
    assert "fp16" not in ds and "bf16" not in ds


def test_fp16_uses_dynamic_loss_scaling():
    assert build(precision="fp16")["fp16"]["loss_scale"] == 0


@pytest.mark.parametrize("stage", [1, 2])
def test_overlap_comm_and_buckets_for_zero_1_2(stage):
    zero = build(zero_stage=stage, overlap_comm=True, bucket_size=50_000_000)["zero_optimization"]
    assert zero == {"stage": stage, "overlap_comm": True, "reduce_bucket_size": 50_000_000,
                    "allgather_bucket_size": 50_000_000}


def test_zero_3_buckets_are_the_prefetch_bucket():
    zero = build(zero_stage=3, bucket_size=10_000_000)["zero_optimization"]
    assert zero["reduce_bucket_size"] == 10_000_000 and zero["stage3_prefetch_bucket_size"] == 10_000_000
    # DeepSpeed's own default at stage 3 (ZeroConfig), written out so the record says what ran.
    assert "allgather_bucket_size" not in zero and zero["overlap_comm"] is True


def test_zero_0_has_no_overlap_or_bucket_keys():
    # ZeRO 0 all-reduces after backward in DeepSpeed; the keys would be ignored, so they are not written.
    assert build(zero_stage=0, overlap_comm=True, bucket_size=1000)["zero_optimization"] == {"stage": 0}


def test_offload_keeps_torch_adamw():
    ds = build(zero_stage=2, offload="cpu")
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["zero_force_ds_cpu_optimizer"] is False


def test_activation_checkpointing_section():
    assert "activation_checkpointing" in build(activation_checkpointing=True)
    assert "activation_checkpointing" not in build()


@pytest.mark.parametrize("field", ["compile", "channels_last"])
def test_worker_side_options_leave_the_deepspeed_config_alone(field):
    # torch.compile and channels-last are applied by the worker to the model and batches.
    assert build(**{field: True}) == build()


def test_user_config_overrides_the_adamw_choice(tmp_path):
    user = tmp_path / "ds.json"
    user.write_text('{"optimizer": {"params": {"fused": false}}}')
    assert build(deepspeed_config=str(user))["optimizer"]["params"]["fused"] is False


def test_deepspeed_passes_fused_through_to_torch_adamw():
    """DeepSpeed's torch_adam path pops only `foreach`: `fused` reaches torch.optim.AdamW (CPU kernel too)."""
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    params = dict(build()["optimizer"]["params"])
    # With torch_adam the method returns before it reads anything off the engine.
    cls, kwargs = DeepSpeedEngine.get_optimizer_configuration(None, params, True)
    assert cls is torch.optim.AdamW and kwargs == {"foreach": None}
    w = torch.nn.Parameter(torch.ones(4))
    opt = cls([w], **params, **kwargs)
    assert opt.defaults["fused"] is True
    w.grad = torch.ones(4)
    opt.step()
    assert float(w.detach().sum()) < 4.0
