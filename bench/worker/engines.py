"""The model and the training engine of a rank: a timm ViT under DeepSpeed, plain DDP or FSDP2.

    model = create_model(cfg, spec, num_classes)
    engine = build_engine(cfg, model, ds_config, device)
    out = engine(x); engine.backward(loss); engine.step()

bench's ranks (bench.worker.main) and the benchmarks/ scripts build them
here, so a benchmark measures exactly what `bench run` runs.
"""

from __future__ import annotations

from typing import Any

from bench.core.config import RunConfig
from bench.core.models import ModelSpec


def create_model(cfg: RunConfig, spec: ModelSpec, num_classes: int):
    """The timm model of spec with the run's activation checkpointing and torch.compile."""
    import timm
    import torch

    model = timm.create_model(spec.timm_name, pretrained=False, num_classes=num_classes, img_size=spec.img_size,
                              **spec.kwargs)
    if cfg.activation_checkpointing and hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
    if cfg.compile:
        model = torch.compile(model)
    return model


def build_engine(cfg: RunConfig, model, ds_config: dict[str, Any], device):
    """DeepSpeed's engine for ds_config (its pipeline engine with --pipeline-stages > 1), or the DDP or
    FSDP2 engine with the same optimizer and clipping."""
    if cfg.engine == "ddp":
        from bench.worker.ddp import DDPEngine
        return DDPEngine(model, ds_config, device)
    if cfg.engine == "fsdp2":
        from bench.worker.fsdp2 import FSDP2Engine
        return FSDP2Engine(model, ds_config, device, reshard_after_forward=cfg.reshard_after_forward,
                           precision=cfg.precision, tensor_parallel=cfg.tensor_parallel)
    if cfg.pipeline_stages > 1:
        from bench.worker import pipeline
        return pipeline.build_engine(cfg, model, ds_config)
    import deepspeed

    if cfg.tensor_parallel > 1:
        return _autotp_engine(cfg, model, ds_config)
    stage = ds_config.get("zero_optimization", {}).get("stage", cfg.zero_stage)  # what DeepSpeed will run
    sharded = shard_zero3(model, ds_config, device) if stage == 3 else None
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    engine.sharded_from = sharded
    if stage == 0:
        skip_allreduce_alone(engine)
    return engine


def skip_allreduce_alone(engine) -> None:
    """No gradient all-reduce in a data-parallel world of one (validate's per-GPU runs, `--gpus 1`).

    DeepSpeed 0.19.8 at ZeRO-0 reduces anyway: it flattens every gradient into a buffer, all-reduces it over
    the one rank, divides by 1 and copies it back (engine.allreduce_gradients -> buffered_allreduce_fallback),
    which profiled at ~5 ms of a ~300 ms vit-micro step on one CPU core (benchmarks/README.md) and is a copy of
    every gradient twice on a GPU. A sum over one rank is the identity: DeepSpeed's own switch skips it.
    ZeRO-1+ only: they keep their reduction (their optimizers keep books in it).
    """
    import torch.distributed as dist

    if dist.get_world_size() == 1 and getattr(engine, "enable_backward_allreduce", False) is True:
        engine.enable_backward_allreduce = False


def _autotp_engine(cfg: RunConfig, model, ds_config: dict[str, Any]):
    """DeepSpeed's engine with its own tensor parallelism (AutoTP, ds_config["tensor_parallel"]) and ZeRO over
    the data-parallel ranks; bench checks the blocks first and fixes the attention after (tensor_parallel)."""
    import deepspeed
    import torch.distributed as dist

    from bench.worker import tensor_parallel as tp

    tp.check(model, cfg.tensor_parallel)
    whole = tp.split_params(model)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    tp.after_autotp(engine.module)
    from deepspeed.utils import groups

    engine.tensor_parallel_group = groups.get_tensor_model_parallel_group().group_name
    engine.tensor_parallel_layout = tp.describe(engine.module, cfg.tensor_parallel, dist.get_rank(), whole,
                                                "DeepSpeed AutoTP (tensor_parallel.autotp_size, partition_config)")
    return engine


def settings(engine) -> dict[str, Any]:
    """What the engine really runs with, read off the objects that do the work, not off ds_config.json.

    A setting DeepSpeed ignores or overrides (an option its version renamed, a stage that has no such
    thing) shows here as it is: the ZeRO optimizer's own overlap_comm and cpu_offload (stages 1-2),
    offload_optimizer and offload_param (stage 3), and the stage the engine reports.
    """
    opt = getattr(engine, "optimizer", None)
    out: dict[str, Any] = {"optimizer": type(opt).__name__ if opt is not None else None}
    stage = getattr(engine, "zero_optimization_stage", None)
    if callable(stage):
        out["zero_stage"] = int(stage())
    for attr in ("overlap_comm", "cpu_offload", "partition_gradients", "offload_optimizer", "offload_param"):
        value = getattr(opt, attr, None)
        if isinstance(value, bool):
            out[attr] = value
    if isinstance(getattr(engine, "enable_backward_allreduce", None), bool):
        out["backward_allreduce"] = engine.enable_backward_allreduce
    return out


def shard_zero3(model, ds_config: dict[str, Any], device) -> dict[str, Any]:
    """Partition the CPU-built model with deepspeed.zero.Init(module=model) before DeepSpeed's engine starts.

    Without it, deepspeed.initialize (0.19.8, engine._configure_distributed_model) moves the whole module to
    the GPU and only then does the ZeRO-3 optimizer partition it (parameter_offload.py, the same Init), so a
    point needs the unsharded fp32 model on one GPU. Here each parameter goes to the device alone, is
    broadcast from rank 0, cut to this rank's partition (on the device, or where offload_param says) and
    freed (partition_parameters.py, _convert_to_zero_parameters); the engine then sees a ZeRO-Init model
    and moves nothing. Not the `with zero.Init():` form around the build: there each submodule is
    partitioned as soon as it is built, and timm's ViT init (init_weights, trunc_normal_ of pos_embed) then
    writes into freed parameters, so the weights are not the seed's (tried: 98 of 152 tensors of
    vit_tiny differ from the CPU build); the parameter count and FLOPs are taken from the CPU build before
    this (bench.worker.main), so they stay the non-ZeRO run's.
    """
    import deepspeed
    import torch

    # What the engine would cast (parameters only, _cast_module_mixed_precision): the partitions keep the dtype.
    half = (torch.float16 if ds_config.get("fp16", {}).get("enabled") else
            torch.bfloat16 if ds_config.get("bf16", {}).get("enabled") else None)
    with torch.no_grad():
        for p in model.parameters():
            if half is not None and p.is_floating_point():
                p.data = p.data.to(half)
        # Buffers are never partitioned and the engine no longer moves the module: they go to the device here.
        for m in model.modules():
            for name, b in m._buffers.items():
                if b is not None:
                    m._buffers[name] = b.to(device)
    init = deepspeed.zero.Init(module=model, config_dict_or_path=ds_config)
    return {"how": "deepspeed.zero.Init(module=...) over the CPU-built model: one parameter at a time on the "
                   "device, partitioned, freed", "gathered_on": str(init.local_device),
            "partitions_on": str(getattr(init.remote_device, "value", init.remote_device)),
            "backend": torch.distributed.get_backend()}
