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

With --tensor-parallel T, torchtitan's 2D way: a (dp, tp) mesh, each block
split over "tp" first (bench.worker.tensor_parallel, DTensor), then every
unit sharded over "dp", so a block's parameters are 2D DTensors (FSDP2's
dim-0 shard of this rank's TP shard) and the rest 1D over "dp". With D = 1
FSDP2 shards over one rank and holds everything: the TP shards alone.
"""

from __future__ import annotations

from typing import Any

from bench.worker.ddp import TorchEngine


def blocks_of(model) -> list:
    """The transformer blocks of a timm ViT (model.blocks), each its own FSDP unit."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ValueError(f"fsdp2: {type(model).__name__} has no .blocks to shard one unit per block")
    return list(blocks)


class FSDP2Engine(TorchEngine):
    def __init__(self, model, ds_config: dict[str, Any], device, *, reshard_after_forward: bool,
                 precision: str, tensor_parallel: int = 1) -> None:
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # No model.to(device) first: that would need the whole unsharded fp32 model on one GPU. fully_shard
        # moves each unit's parameters to the mesh's device as it shards them (torch's _move_states_to_device),
        # one block at a time, so a GPU holds its shards plus one block in passing.
        kw: dict[str, Any] = {"reshard_after_forward": reshard_after_forward}
        if precision == "bf16":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        params = None
        if tensor_parallel > 1:
            from bench.worker import tensor_parallel as tp

            world_mesh = tp.mesh(device, tensor_parallel)
            whole = tp.split_params(model)
            tp.parallelize(model, world_mesh["tp"])
            # Before FSDP2 shards it further: what this rank's TP shard is.
            self.tensor_parallel_layout = tp.describe(model, tensor_parallel, world_mesh.get_rank(), whole,
                                                      "torch DTensor (parallelize_module) on the tp dimension of a "
                                                      "(dp, tp) mesh, FSDP2 over dp")
            self.tensor_parallel_group = world_mesh["tp"].get_group().group_name
            kw["mesh"] = world_mesh["dp"]
        for block in blocks_of(model):
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        self.model = model
        self.sharded_from = {"how": "fully_shard per block, then the root, over the CPU-built model: each unit's "
                                    "parameters moved to the device as it is sharded",
                             "partitions_on": str(device), "backend": torch.distributed.get_backend()}
        if tensor_parallel > 1:
            params = tp.param_groups(model.parameters())
            self.clip_grad_norm_ = tp.clip_grad_norm_  # type: ignore[method-assign]
        self._init_optimizer(params or model.parameters(), ds_config)

    @property
    def module(self):
        return self.model

    def train(self) -> None:
        self.model.train()

    def __call__(self, x):
        # Gradients are reduce-scattered only in the boundary's backward; before it they accumulate unsharded.
        self.model.set_requires_gradient_sync(self._at_boundary())
        return self.model(x)

    def backward(self, loss) -> None:
        (loss / self.accum).backward()
