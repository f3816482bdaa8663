"""A timm ViT as DeepSpeed pipeline stages (PipelineModule), and its training loop.

    layers = stage_layers(vit)               # [Embed, block 0, ..., block L-1, Head]
    engine = build_engine(cfg, vit, ds_config)
    times = train(engine, batches, total_steps=..., accum=..., ...)

The ViT is cut into an embedding layer (patch embedding, class token,
position embedding), its blocks, and a head layer (final norm, pooling,
head); DeepSpeed balances them over the stages by parameter count. Each
layer owns only its own parameters, so each stage holds only its own (a
wrapper that kept the whole ViT would put every parameter in every stage).
The two end layers run timm's own _pos_embed / pool code on themselves,
so a stage computes exactly what the unsplit model computes.

A step is DeepSpeed's train_batch: `accum` micro batches through the
1F1B schedule, gradients all-reduced over the data-parallel ranks of each
stage, one optimizer step. The bubble, the share of a step each stage
idles while the pipeline fills and drains, is bench.analysis.metrics.bubble.
The step's parts (forward, backward, optimizer) interleave across micro
batches inside DeepSpeed's schedule and are not timed apart: the record
says so rather than showing zeros.
"""

from __future__ import annotations

import time
from typing import Any

PARTS_REASON = ("pipeline stages interleave forward, backward and the optimizer inside DeepSpeed's schedule: "
                "the step is timed whole")
ACC_REASON = "train_batch returns the loss only: no training accuracy for pipeline stages"


def stage_layers(vit) -> list:
    """[Embed, *blocks, Head] over the parameters of a built timm VisionTransformer (shared, not copied)."""
    import torch
    from timm.models.vision_transformer import VisionTransformer

    if not isinstance(vit, VisionTransformer):
        raise ValueError(f"pipeline stages: {type(vit).__name__} is not a timm VisionTransformer")

    class Embed(torch.nn.Module):
        """patch_embed, prefix tokens, position embedding: timm's forward_features before the blocks."""

        _pos_embed = VisionTransformer._pos_embed

        def __init__(self) -> None:
            super().__init__()
            for name in ("patch_embed", "pos_drop", "patch_drop", "norm_pre"):
                setattr(self, name, getattr(vit, name))
            for name in ("cls_token", "reg_token", "pos_embed"):
                setattr(self, name, getattr(vit, name))  # Parameters (or None): registered here, not copied
            for name in ("dynamic_img_size", "no_embed_class", "num_prefix_tokens"):
                setattr(self, name, getattr(vit, name))

        def forward(self, x):
            return self.norm_pre(self.patch_drop(self._pos_embed(self.patch_embed(x))))

    class Head(torch.nn.Module):
        """norm, pooling, fc_norm, head: timm's forward_features after the blocks and forward_head."""

        pool = VisionTransformer.pool

        def __init__(self) -> None:
            super().__init__()
            for name in ("norm", "attn_pool", "fc_norm", "head_drop", "head"):
                setattr(self, name, getattr(vit, name))
            for name in ("global_pool", "num_prefix_tokens", "pool_include_prefix"):
                setattr(self, name, getattr(vit, name, None))

        def forward(self, x):
            return self.head(self.head_drop(self.fc_norm(self.pool(self.norm(x)))))

    return [Embed(), *vit.blocks, Head()]


def _loss(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out.float(), y)


def build_engine(cfg, vit, ds_config: dict[str, Any]):
    """DeepSpeed's PipelineEngine over the stages of vit; the other stages' parameters are freed on this rank."""
    import deepspeed
    import torch
    from deepspeed.pipe import PipelineModule

    layers = stage_layers(vit)
    module = PipelineModule(layers=layers, num_stages=cfg.pipeline_stages, loss_fn=_loss,
                            partition_method="parameters")
    local = set(range(module._local_start, module._local_stop))
    for i, layer in enumerate(layers):
        if i not in local:
            for p in layer.parameters():
                p.data = torch.empty(0, dtype=p.dtype)  # another stage's: every rank built the whole ViT
    params = [p for p in module.parameters() if p.requires_grad]
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=params, config=ds_config)
    engine.pipeline_layout = layout(module, layers)
    return engine


def layout(module, layers: list) -> dict[str, Any]:
    """The stages: their layer range and names (all stages), and this stage's parameter count."""
    names = [type(layer).__name__ if type(layer).__name__ in ("Embed", "Head") else f"block{i - 1}"
             for i, layer in enumerate(layers)]
    parts = list(module.parts)
    stages = [{"stage": s, "layers": names[parts[s]:parts[s + 1]]} for s in range(len(parts) - 1)]
    return {"stages": stages, "stage": int(module.stage_id),
            "stage_params": sum(p.numel() for p in module.parameters())}


def train(engine, batches, *, total_steps: int, accum: int, device, on_step=None, counter=None,
          warmup_steps: int = 0, on_before_optimizer=None, on_steady=None):
    """total_steps train_batch calls of `accum` micro batches each; returns loop.StepTimes (step and loss only).

    on_before_optimizer() runs in the last step just before the inner optimizer steps (a torch
    step pre-hook), when this stage's gradients and optimizer states both exist; its time is not the step's.
    on_steady() runs once before the first steady step (warmup_steps), as in loop.train: the peak memory
    statistics are reset there.
    """
    import torch

    from bench.worker.loop import StepTimes, batches_forever, step_applied
    from bench.worker.model_states import inner_optimizer

    times = StepTimes(timing="the host clock around DeepSpeed's train_batch, the device synchronized at each step's "
                             "start and by its loss fetch")
    stream = batches_forever(batches)
    excluded = [0.0]
    handle = None
    engine.train()
    for step in range(total_steps):
        if step == warmup_steps:
            times.steady_from = step
            if on_steady is not None:
                on_steady()
        if step + 1 == total_steps and on_before_optimizer is not None:
            def hook(*_args, **_kwargs) -> None:
                t0 = time.perf_counter()
                on_before_optimizer()
                excluded[0] += time.perf_counter() - t0
            handle = inner_optimizer(engine.optimizer).register_step_pre_hook(hook)
        micro = ((x, y) for _, (_, x, y) in zip(range(accum), stream))
        if device.type == "cuda":
            torch.cuda.synchronize()
        if counter is not None:
            counter.begin_step()
        t0 = time.perf_counter()
        loss = engine.train_batch(data_iter=micro)
        value = float(loss)  # a device sync: the step has ended on this rank
        step_time = time.perf_counter() - t0 - excluded[0]
        excluded[0] = 0.0
        if counter is not None:
            counter.end_step()
        times.step.append(step_time)
        times.loss.append(value)
        times.applied.append(step_applied(engine))
        if value != value or abs(value) == float("inf"):
            raise FloatingPointError(f"loss is {value} at step {step}")
        if on_step is not None:
            on_step(step, times)
    if handle is not None:
        handle.remove()
    return times
