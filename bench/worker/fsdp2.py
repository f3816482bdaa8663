"""PyTorch FSDP2 (`fully_shard`) with the interface of a DeepSpeed engine: the third arm beside DDP and ZeRO.

Sharding is the way torchtitan applies it: one FSDP unit per transformer
block, then the root (patch embedding, position embedding, norm and head),
so a block's parameters are gathered just before it runs and its gradients
reduce-scattered as soon as its backward ends.

    reshard_after_forward=True    each block's gathered parameters are freed
                                  after its forward and gathered again in
                                  backward: parameters, gradients and optimizer
                                  states all sharded (ZeRO-3's volume, 3 Psi)
    reshard_after_forward=False   kept from forward to backward: one gather
                                  per step (ZeRO-2's volume, 2 Psi) for the
                                  memory of whole parameters between the two

bf16 is a MixedPrecisionPolicy: bf16 parameters for compute, fp32 sharded
parameters (the master copy the optimizer steps) and fp32 gradient
reduction. fp32 runs no policy. It matches what bench.worker.ddp matches
of DeepSpeed: the loss divided by the accumulation steps in backward,
gradients reduced only at the accumulation boundary
(set_requires_gradient_sync(False) before it), clipped to norm 1.0 and
stepped by torch's AdamW with ds_config's hyper-parameters.
"""

from __future__ import annotations

from typing import Any


def blocks_of(model) -> list:
    """The transformer blocks of a timm ViT (model.blocks), each its own FSDP unit."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ValueError(f"fsdp2: {type(model).__name__} has no .blocks to shard one unit per block")
    return list(blocks)


class FSDP2Engine:
    def __init__(self, model, ds_config: dict[str, Any], device, *, reshard_after_forward: bool,
                 precision: str) -> None:
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        model = model.to(device)
        kw: dict[str, Any] = {"reshard_after_forward": reshard_after_forward}
        if precision == "bf16":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in blocks_of(model):
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        self.model = model
        params = ds_config["optimizer"]["params"]
        # The same AdamW implementation (--adamw: fused/foreach) as DDP and DeepSpeed's torch_adam path: torch's
        # fused kernel steps FSDP2's DTensor shards too (their local tensors), on CPU and CUDA.
        impl = {k: params[k] for k in ("fused", "foreach") if k in params}
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=params["lr"], betas=tuple(params["betas"]),
                                           eps=params["eps"], weight_decay=params["weight_decay"], **impl)
        self.accum = int(ds_config["gradient_accumulation_steps"])
        self.clip = float(ds_config.get("gradient_clipping", 0.0))
        self.micro_steps = 0

    @property
    def module(self):
        return self.model

    def train(self) -> None:
        self.model.train()

    def _at_boundary(self) -> bool:
        return (self.micro_steps + 1) % self.accum == 0

    def __call__(self, x):
        # Gradients are reduce-scattered only in the boundary's backward; before it they accumulate unsharded.
        self.model.set_requires_gradient_sync(self._at_boundary())
        return self.model(x)

    def backward(self, loss) -> None:
        (loss / self.accum).backward()

    def step(self) -> None:
        import torch

        if self._at_boundary():
            if self.clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.micro_steps += 1
