"""The timed training loop of one rank, and test-set evaluation.

Each optimizer step is timed in parts with a device sync around each part,
so the parts add up to the step:
  data      fetching and augmenting the micro batch(es)
  forward   model forward + loss (ZeRO-3's parameter all-gathers happen here)
  backward  engine.backward: autograd, and the gradient reductions an engine
            issues during it (DDP's bucketed all-reduce, ZeRO's reduce buckets)
  optimizer engine.step (ZeRO-0/1's boundary all-reduce at DeepSpeed's
            step, ZeRO-1/2's all-gather of the updated partitions)
Communication is counted apart, by what was issued in each step
(bench.worker.comm_counter), because it happens inside all three parts.
The first `timing_warmup` steps are kept apart and excluded from throughput.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class StepTimes:
    data: list[float] = field(default_factory=list)
    forward: list[float] = field(default_factory=list)
    backward: list[float] = field(default_factory=list)
    optimizer: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    acc: list[float] = field(default_factory=list)
    applied: list[bool] = field(default_factory=list)
    """Per step: whether the optimizer updated the weights (False: fp16's loss scaler skipped it)."""
    steady_from: int | None = None
    """The step the steady window began at, where on_steady ran (peak memory statistics reset)."""
    # Wall clock (perf_counter) at the loop's start and at each step's end, less the time the
    # model-state measurement took: whole epochs are measured from these (epoch_walls).
    began: float | None = None
    ended: list[float] = field(default_factory=list)


def step_applied(engine) -> bool:
    """Whether the engine's last optimizer step changed the weights: DeepSpeed's fp16 loss scaler skips the
    update of a step whose gradients overflowed (was_step_applied); the torch engines have no scaler."""
    was = getattr(engine, "was_step_applied", None)
    return bool(was()) if callable(was) else True


def steady_window(times: StepTimes, warmup_steps: int) -> tuple[list[float], list[int]]:
    """(times of the steady steps whose update was applied, indices of the steady steps the scaler skipped).

    A skipped step is timed like any other but trains nothing: it is left out of images/s and MFU. If every
    steady step was skipped, all are kept (the record's skipped_steps says so) rather than no figure at all.
    """
    steady = range(warmup_steps, len(times.step))
    applied = times.applied or [True] * len(times.step)
    skipped = [i for i in steady if not applied[i]]
    kept = [times.step[i] for i in steady if applied[i]]
    return (kept or [times.step[i] for i in steady]), skipped


def epoch_walls(times: StepTimes, steps_per_epoch: int) -> list[float]:
    """Wall-clock seconds of each whole epoch the loop ran: warm-up, data loading and waits included.

    Epoch e is steps e*spe .. (e+1)*spe - 1, from the end of the step before it (the loop's start for
    the first) to the end of its last step. An epoch the run stopped inside is not one.
    """
    if times.began is None or steps_per_epoch < 1:
        return []
    marks = [times.began, *times.ended]
    return [marks[(e + 1) * steps_per_epoch] - marks[e * steps_per_epoch]
            for e in range((len(marks) - 1) // steps_per_epoch)]


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


def train(engine, batches, *, total_steps: int, accum: int, device, on_step=None, counter=None,
          on_last_step_backward=None, warmup_steps: int = 0, on_steady=None) -> StepTimes:
    """Train total_steps optimizer steps; counter (CommCounter) sees each step's collectives.

    on_last_step_backward() runs after each backward of the last step, before its engine.step: gradients
    and optimizer states both exist then (at every micro step: ZeRO-1 accumulates whole gradients until
    the boundary, ZeRO-2 partitions them as it goes). Its time is not the step's.
    on_steady() runs once, before the first steady step (warmup_steps): bench resets the device's peak
    memory statistics there, so the peak covers steady steps only.
    """
    import torch
    import torch.nn.functional as F

    sync = _sync_fn(device)
    times = StepTimes()
    stream = batches_forever(batches)
    engine.train()
    excluded_total = 0.0
    sync()
    times.began = time.perf_counter()
    for step in range(total_steps):
        if step == warmup_steps:
            times.steady_from = step
            if on_steady is not None:
                on_steady()
        t_data = t_fwd = t_bwd = t_opt = 0.0
        # Loss and hits stay on the device until the step ends: one fetch per
        # step, not two per micro batch (each fetch is a device sync).
        loss_dev = correct_dev = None
        seen = 0
        sync()
        if counter is not None:
            counter.begin_step()
        t_step = time.perf_counter()
        for micro in range(accum):
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
            t_bwd += t3 - t2
            if on_last_step_backward is not None and step + 1 == total_steps:
                on_last_step_backward()
                excluded = time.perf_counter() - t3  # the measurement is not part of the step
                t_step += excluded
                t3 += excluded
                excluded_total += excluded
            engine.step()
            sync()
            t4 = time.perf_counter()
            t_data += t1 - t0
            t_fwd += t2 - t1
            t_opt += t4 - t3
            with torch.no_grad():
                hits = (out.argmax(dim=1) == y).sum()
                loss_dev = loss.detach() if loss_dev is None else loss_dev + loss.detach()
                correct_dev = hits if correct_dev is None else correct_dev + hits
                seen += y.numel()
        loss_sum, correct = torch.stack([loss_dev.double(), correct_dev.double()]).tolist()
        step_time = time.perf_counter() - t_step
        times.applied.append(step_applied(engine))
        times.ended.append(t_step + step_time - excluded_total)
        if counter is not None:
            counter.end_step()
        for name, value in (("data", t_data), ("forward", t_fwd), ("backward", t_bwd),
                            ("optimizer", t_opt), ("step", step_time), ("loss", loss_sum / accum),
                            ("acc", correct / max(seen, 1))):
            getattr(times, name).append(value)
        if not math.isfinite(loss_sum):
            raise FloatingPointError(f"loss is {loss_sum} at step {step}")
        if on_step is not None:
            on_step(step, times)
    return times


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
