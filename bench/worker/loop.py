"""The timed training loop of one rank, and test-set evaluation.

Each optimizer step is timed in parts with a device sync around each part,
so the parts add up to the step:
  data      fetching and augmenting the micro batch(es)
  forward   model forward + loss
  backward  engine.backward: autograd, plus the gradient all-reduce where
            DeepSpeed does it inside backward (ZeRO 0 without overlap)
  allreduce DeepSpeed's own 'bwd_allreduce_microstep' timer, a part of
            backward (its share is reported apart, not added again)
  optimizer engine.step
The first `timing_warmup` steps are kept apart and excluded from throughput.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class StepTimes:
    data: list[float] = field(default_factory=list)
    forward: list[float] = field(default_factory=list)
    backward: list[float] = field(default_factory=list)
    allreduce: list[float] = field(default_factory=list)
    optimizer: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    acc: list[float] = field(default_factory=list)


def _sync_fn(device) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def batches_forever(batches, start_epoch: int = 0):
    """(epoch, x, y) over consecutive epochs of a DeviceBatches/LoaderBatches."""
    epoch = start_epoch
    while True:
        for x, y in batches.epoch(epoch):
            yield epoch, x, y
        epoch += 1


def train(engine, batches, *, total_steps: int, accum: int, device, on_step=None) -> StepTimes:
    import torch
    import torch.nn.functional as F

    sync = _sync_fn(device)
    times = StepTimes()
    stream = batches_forever(batches)
    engine.train()
    for step in range(total_steps):
        t_data = t_fwd = t_bwd = t_red = t_opt = 0.0
        # Loss and hits stay on the device until the step ends: one fetch per
        # step, not two per micro batch (each fetch is a device sync).
        loss_dev = correct_dev = None
        seen = 0
        sync()
        t_step = time.perf_counter()
        for _ in range(accum):
            t0 = time.perf_counter()
            _, x, y = next(stream)
            sync()
            t1 = time.perf_counter()
            out = engine(x)
            loss = F.cross_entropy(out.float(), y)
            sync()
            t2 = time.perf_counter()
            engine.backward(loss)
            sync()
            t3 = time.perf_counter()
            engine.step()
            sync()
            t4 = time.perf_counter()
            t_data += t1 - t0
            t_fwd += t2 - t1
            t_bwd += t3 - t2
            t_opt += t4 - t3
            t_red += _ds_allreduce_seconds(engine)
            with torch.no_grad():
                hits = (out.argmax(dim=1) == y).sum()
                loss_dev = loss.detach() if loss_dev is None else loss_dev + loss.detach()
                correct_dev = hits if correct_dev is None else correct_dev + hits
                seen += y.numel()
        loss_sum, correct = torch.stack([loss_dev.double(), correct_dev.double()]).tolist()
        step_time = time.perf_counter() - t_step
        for name, value in (("data", t_data), ("forward", t_fwd), ("backward", t_bwd), ("allreduce", t_red),
                            ("optimizer", t_opt), ("step", step_time), ("loss", loss_sum / accum),
                            ("acc", correct / max(seen, 1))):
            getattr(times, name).append(value)
        if not math.isfinite(loss_sum):
            raise FloatingPointError(f"loss is {loss_sum} at step {step}")
        if on_step is not None:
            on_step(step, times)
    return times


def _ds_allreduce_seconds(engine) -> float:
    """The all-reduce part of the last backward, from DeepSpeed's breakdown timers (ms)."""
    get = getattr(engine, "get_wall_clock_timers", None)
    if get is None:
        return 0.0
    timers: dict[str, Any] = get() or {}
    return float(timers.get("bwd_allreduce_microstep", 0.0)) / 1000.0


def evaluate(model, batches, device) -> tuple[int, int]:
    """(correct, seen) over this rank's shard of the test set.

    Shards are padded with PAD_LABEL so every rank runs as many forwards
    (ZeRO-3 gathers parameters collectively); eval_counts skips the padding.
    """
    import torch

    from bench.worker.data import eval_counts

    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for x, y in batches.epoch(0):
            c, n = eval_counts(model(x), y)
            correct += int(c)
            seen += int(n)
    model.train()
    return correct, seen
