"""RunConfig -> the DeepSpeed JSON config (pure; no deepspeed import).

The generated config is written next to the results as ds_config.json, so a
run can be reproduced with plain `deepspeed` and the same file.
"""

from __future__ import annotations

import json
from typing import Any

from bench.core.config import RunConfig
from bench.core.errors import BadInput

# Large enough that DeepSpeed's own per-step prints stay out of the logs; bench
# reports the figures itself.
_QUIET = 1_000_000
# DeepSpeed's async I/O defaults (deepspeed.runtime.swap_tensor.constants), written out so ds_config.json says
# what ran; a user JSON may tune them.
AIO = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True, "use_gds": False}


# DeepSpeed's AutoTP knows Hugging Face models by their config; a timm ViT it is told layer by layer (its
# configurable partition_config, matched on a module's name + ".weight"; a layer's bias follows its weight).
# qkv is one Linear to 3 x heads x head_dim: "shape" [3, -1] splits each of q, k and v into T row blocks, so
# rank t holds q, k and v of heads t H/T .. (t+1) H/T - 1, whole heads together.
AUTOTP_VIT = {"use_default_specs": False, "layer_specs": [
    {"patterns": [r".*\.attn\.qkv\.weight$"], "partition_type": "column", "shape": [3, -1], "partition_dim": 0},
    {"patterns": [r".*\.mlp\.fc1\.weight$"], "partition_type": "column"},
    {"patterns": [r".*\.attn\.proj\.weight$", r".*\.mlp\.fc2\.weight$"], "partition_type": "row"},
]}


def build(cfg: RunConfig, world_size: int, total_steps: int, device: str | None = None) -> dict[str, Any]:
    """The DeepSpeed config; device: the ranks' device once known ("cuda"/"cpu"), else cfg.device's."""
    # Pinned host buffers make ZeRO-Offload's and ZeRO-Infinity's copies to and from the GPU asynchronous
    # and faster; without a GPU there is nothing to pin for (and pinning needs a CUDA context).
    pin = (device or cfg.device) == "cuda"
    ds: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": cfg.grad_accum,
        "train_batch_size": cfg.micro_batch * cfg.grad_accum * world_size,
        "steps_per_print": _QUIET,
        "wall_clock_breakdown": cfg.breakdown,
        "gradient_clipping": 1.0,
        "optimizer": {
            "type": "AdamW",
            # torch's AdamW: DeepSpeed's fused CPU Adam would JIT-compile for
            # ~40 s on first use, at the same speed.
            "params": {"lr": cfg.lr, "weight_decay": cfg.weight_decay, "betas": [0.9, 0.999],
                       "eps": 1e-8, "torch_adam": True, **adamw_impl(cfg.adamw)},
        },
        "zero_optimization": zero_section(cfg, pin),
    }
    if cfg.offload == "nvme":
        ds["aio"] = dict(AIO)
    if cfg.offload:
        # Keep torch's AdamW under offload too (DeepSpeedCPUAdam needs a JIT build).
        ds["zero_force_ds_cpu_optimizer"] = False
    if cfg.precision == "fp16":
        ds["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    elif cfg.precision == "bf16":
        ds["bf16"] = {"enabled": True}
    sched = _scheduler(cfg, total_steps)
    if sched:
        ds["scheduler"] = sched
    if cfg.activation_checkpointing:
        ds["activation_checkpointing"] = {"partition_activations": False}
    if cfg.tensor_parallel > 1 and cfg.engine == "deepspeed":
        ds["tensor_parallel"] = {"autotp_size": cfg.tensor_parallel, "partition_config": AUTOTP_VIT}
        # DeepSpeed 0.19.8 checks train_batch_size against the whole world (D x T) at ZeRO 0-2 but against the
        # data-parallel ranks (D) at ZeRO-3 (tried, bf16): left out, it derives it from micro x accum itself.
        del ds["train_batch_size"]
    if cfg.deepspeed_config:
        generated = ds
        ds = merge(ds, load_user(cfg.deepspeed_config))
        check_agrees(generated, ds, cfg.deepspeed_config)
    return ds


def zero_section(cfg: RunConfig, pin: bool) -> dict[str, Any]:
    """zero_optimization: the stage, its overlap and buckets, and where offload puts the states."""
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.zero_stage > 0:
        # Written out even when not given, as DeepSpeed's default (ZeroConfig: on at stage 3 only),
        # so ds_config.json and the record say what ran.
        zero["overlap_comm"] = cfg.overlap_comm if cfg.overlap_comm is not None else cfg.zero_stage == 3
        if cfg.bucket_size is not None:
            zero["reduce_bucket_size"] = cfg.bucket_size
            if cfg.zero_stage < 3:
                zero["allgather_bucket_size"] = cfg.bucket_size
            else:
                zero["stage3_prefetch_bucket_size"] = cfg.bucket_size
    if cfg.offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    elif cfg.offload == "nvme":
        # ZeRO-Infinity: the fp32 optimizer states (master and Adam moments) and the parameters' partitions
        # live in files under nvme_path, swapped in around their use through DeepSpeed's async_io op.
        swap = {"device": "nvme", "nvme_path": cfg.nvme_path, "pin_memory": pin}
        zero["offload_optimizer"] = dict(swap)
        zero["offload_param"] = dict(swap)
    return zero


# What bench's loop, figures and MFU take from its own options: a user JSON may tune everything else.
_OWNED = (
    (("train_micro_batch_size_per_gpu",), "--micro-batch"),
    (("gradient_accumulation_steps",), "--grad-accum"),
    (("train_batch_size",), "--micro-batch x --grad-accum x ranks"),
    (("zero_optimization", "stage"), "--zero-stage"),
    (("zero_optimization", "offload_optimizer", "device"), "--offload"),
    (("zero_optimization", "offload_param", "device"), "--offload"),
    (("zero_optimization", "offload_optimizer", "nvme_path"), "--nvme-path"),
    (("fp16", "enabled"), "--precision"),
    (("bf16", "enabled"), "--precision"),
    (("tensor_parallel", "autotp_size"), "--tensor-parallel"),
)


def _get(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def check_agrees(generated: dict[str, Any], merged: dict[str, Any], path: str) -> None:
    """Refuse a user JSON that sets a key bench's options decide to something else (never a silent mismatch).

    bench's loop feeds --micro-batch images and counts --grad-accum micro steps
    per optimizer step, and its figures and MFU assume --zero-stage and
    --precision: were DeepSpeed to run other values, every figure would be wrong.
    """
    for keys, option in _OWNED:
        ours, theirs = _get(generated, keys), _get(merged, keys)
        if keys[-1] == "enabled":  # absent and false are one thing to DeepSpeed
            ours, theirs = bool(ours), bool(theirs)
        if theirs != ours:
            raise BadInput(f"{path}: {'.'.join(keys)} is {theirs!r} but bench's {option} gives {ours!r}; "
                           f"set it with {option.split()[0]} instead")


def adamw_impl(impl: str) -> dict[str, bool]:
    """torch.optim.AdamW keywords for --adamw, as DeepSpeed's torch_adam path passes them on.

    DeepSpeed (engine.get_optimizer_configuration) pops `foreach` and hands
    it to torch.optim.AdamW with every other param, so `fused` reaches torch
    too. torch's default (neither) is foreach on CUDA but a per-tensor loop
    on CPU; fused has CUDA and CPU kernels since torch 2.4. Measured on CPU,
    1 thread: ViT-S/16 (22M parameters) 85 ms a step forloop, 69 foreach,
    18 fused (benchmarks/README.md).
    """
    if impl == "fused":
        return {"fused": True}
    if impl == "foreach":
        return {"foreach": True}
    if impl == "forloop":
        return {"foreach": False}
    raise BadInput(f"--adamw: unknown {impl!r} (choose from fused, foreach, forloop)")


def _scheduler(cfg: RunConfig, total_steps: int) -> dict[str, Any] | None:
    if cfg.schedule == "cosine":
        return {"type": "WarmupCosineLR",
                "params": {"total_num_steps": max(total_steps, cfg.warmup_steps + 1),
                           "warmup_num_steps": cfg.warmup_steps, "warmup_type": "linear"}}
    if cfg.warmup_steps > 0:
        return {"type": "WarmupLR",
                "params": {"warmup_min_lr": 0.0, "warmup_max_lr": cfg.lr,
                           "warmup_num_steps": cfg.warmup_steps, "warmup_type": "linear"}}
    return None


def load_user(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise BadInput(f"--deepspeed-config: cannot read {path!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a DeepSpeed config must be a JSON object, got {type(data).__name__}")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if key in data and (not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] <= 0):
            raise BadInput(f"{path}: {key} must be a positive integer, got {data[key]!r}")
    if "zero_optimization" in data and not isinstance(data["zero_optimization"], dict):
        raise BadInput(f"{path}: zero_optimization must be an object")
    return data


def merge(base: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """Deep merge, the user's values winning; batch keys are made consistent after."""
    out = dict(base)
    for k, v in user.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def batch_sizes(ds: dict[str, Any], world_size: int) -> tuple[int, int, int]:
    """(micro, accum, global) as DeepSpeed will use them; BadInput if inconsistent."""
    micro = ds["train_micro_batch_size_per_gpu"]
    accum = ds["gradient_accumulation_steps"]
    total = ds.get("train_batch_size", micro * accum * world_size)  # absent under AutoTP (build)
    if micro * accum * world_size != total:
        raise BadInput(f"--deepspeed-config: train_batch_size {total} != micro {micro} x accum {accum}"
                       f" x world {world_size}")
    return micro, accum, total
