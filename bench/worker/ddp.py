"""Plain PyTorch DDP with the interface of a DeepSpeed engine: the baseline.

`bench sweep ddp` runs the same model, data, loop and timers through this
engine and through DeepSpeed, so the difference is the engine alone. It
gives the loop what it uses of a DeepSpeed engine:

    out = engine(x); engine.backward(loss); engine.step()
    engine.module (the bare model, for evaluation); engine.train()

and matches what DeepSpeed does for bench's generated config: the loss is
divided by the accumulation steps in backward, gradients are all-reduced
only at the accumulation boundary (`no_sync` before it), clipped to norm
1.0 (ds_config's gradient_clipping) and stepped by torch's AdamW with the
same hyper-parameters. torch.distributed is already initialised
(bench.worker.dist).

Communication: DDP overlaps its bucketed all-reduces with backward inside
autograd hooks. Its reducer would call the process group from C++, out of
Python's sight, so the engine registers torch's Python allreduce hook (the
same arithmetic): every bucket then passes through torch.distributed.all_reduce,
where bench.worker.comm_counter counts it as it counts DeepSpeed's.
"""

from __future__ import annotations

import contextlib
from typing import Any


class TorchEngine:
    """What the plain PyTorch engines (DDP here, FSDP2 in bench.worker.fsdp2) do alike: AdamW from ds_config,
    the accumulation boundary, clipping and the step. A subclass sets self.module's wrapper up and calls
    _init_optimizer with the parameters the optimizer steps."""

    def _init_optimizer(self, parameters, ds_config: dict[str, Any]) -> None:
        import torch

        params = ds_config["optimizer"]["params"]
        # The same AdamW implementation (--adamw: fused/foreach) DeepSpeed's torch_adam path gets; torch's
        # fused kernel steps FSDP2's DTensor shards too (their local tensors), on CPU and CUDA.
        impl = {k: params[k] for k in ("fused", "foreach") if k in params}
        self.optimizer = torch.optim.AdamW(parameters, lr=params["lr"], betas=tuple(params["betas"]),
                                           eps=params["eps"], weight_decay=params["weight_decay"], **impl)
        self.accum = int(ds_config["gradient_accumulation_steps"])
        self.clip = float(ds_config.get("gradient_clipping", 0.0))
        self.micro_steps = 0

    def clip_grad_norm_(self, parameters, max_norm: float) -> None:
        """torch's clipping; FSDP2 with tensor parallelism holds DTensors of two meshes and clips its own way."""
        import torch

        torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def _at_boundary(self) -> bool:
        return (self.micro_steps + 1) % self.accum == 0

    def step(self) -> None:
        import torch

        if self._at_boundary():
            if self.clip > 0:
                self.clip_grad_norm_(self.module.parameters(), self.clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.micro_steps += 1


class DDPEngine(TorchEngine):
    def __init__(self, model, ds_config: dict[str, Any], device) -> None:
        from torch.nn.parallel import DistributedDataParallel

        model = model.to(device)
        ids = [device.index] if device.type == "cuda" else None
        self.ddp = DistributedDataParallel(model, device_ids=ids)
        # torch's own Python allreduce hook (the built-in's arithmetic: divide by n, sum): the reduction then
        # goes through torch.distributed.all_reduce, where bench counts DeepSpeed's collectives too.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        self.ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        self._init_optimizer(model.parameters(), ds_config)

    @property
    def module(self):
        return self.ddp.module

    def train(self) -> None:
        self.ddp.train()

    def __call__(self, x):
        # DDP decides at forward time whether the next backward all-reduces.
        ctx = contextlib.nullcontext() if self._at_boundary() else self.ddp.no_sync()
        with ctx:
            return self.ddp(x)

    def backward(self, loss) -> None:
        ctx = contextlib.nullcontext() if self._at_boundary() else self.ddp.no_sync()
        with ctx:
            (loss / self.accum).backward()
