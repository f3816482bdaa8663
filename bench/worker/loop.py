"""The timed training loop of one rank, and test-set evaluation.

Each optimizer step is timed in parts that add up to the step:
  data      fetching and augmenting the micro batch(es)
  forward   model forward + loss (ZeRO-3's parameter all-gathers happen here)
  backward  engine.backward: autograd, and the gradient reductions an engine
            issues during it (DDP's bucketed all-reduce, ZeRO's reduce buckets)
  optimizer engine.step (ZeRO-0/1's boundary all-reduce at DeepSpeed's
            step, ZeRO-1/2's all-gather of the updated partitions)
How the boundaries are read (StepClock): on CPU the host clock, the device
being the host; on CUDA events recorded on the stream between the parts,
read after the step's one synchronize (the loss and accuracy fetch), so the
host queues a whole step ahead as a training script does and the parts are
the device's own times. Five synchronizes per micro step (the loop before)
made every part boundary a host round trip, which a small model on a fast
GPU spends more time in than in its kernels.
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
    timing: str | None = None
    """How the step and its parts were timed (StepClock.how): the record says it beside the figures."""


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


class StepClock:
    """A step's boundaries: mark() one, seconds(a, b) between two once the step has ended.

    CPU: perf_counter. CUDA: an event recorded on the current stream (a pool reused step after step), read
    only after the step's synchronize, so marking never waits for the device.
    """

    def __init__(self, device):
        import torch

        self.cuda = device.type == "cuda"
        self._torch = torch
        self._pool: list = []
        self._used = 0
        self.how = ("CUDA events on the stream between the parts, one synchronize per step" if self.cuda else
                    "the host clock (CPU: the device is the host)")

    def begin_step(self) -> None:
        self._used = 0

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        if self._used == len(self._pool):
            self._pool.append(self._torch.cuda.Event(enable_timing=True))
        event = self._pool[self._used]
        self._used += 1
        event.record()
        return event

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def sync(self) -> None:
        if self.cuda:
            self._torch.cuda.synchronize()


def batches_forever(batches, start_epoch: int = 0):
    """(epoch, x, y) over consecutive epochs of a DeviceBatches/LoaderBatches."""
    epoch = start_epoch
    while True:
        for x, y in batches.epoch(epoch):
            yield epoch, x, y
        epoch += 1


@dataclass
class _Step:
    """One optimizer step's micro batches as they ran: their marks, the intervals left out of the step's time,
    and the loss and hits still on the device."""
    marks: list[tuple] = field(default_factory=list)     # (t0 data, t1 forward, t2 backward, t3, t3b, t4 end)
    left_out: list[tuple] = field(default_factory=list)  # (t3, t3b): the last step's measurement, not its time
    loss: object = None
    correct: object = None
    seen: int = 0
    excluded_s: float = 0.0                               # host seconds of that measurement


def _micro_step(engine, stream, clock: StepClock, st: _Step, after_backward: Callable[[], None] | None) -> None:
    """Forward, backward and engine.step of one micro batch, each boundary marked; after_backward runs between
    backward and step with the device synchronized around it (its interval is left out of the step)."""
    import torch
    import torch.nn.functional as F

    t0 = clock.mark()
    _, x, y = next(stream)
    t1 = clock.mark()
    out = engine(x)
    loss = F.cross_entropy(out.float(), y)
    t2 = clock.mark()
    engine.backward(loss)
    t3 = t3b = clock.mark()
    if after_backward is not None:
        clock.sync()
        h = time.perf_counter()
        after_backward()
        clock.sync()
        st.excluded_s += time.perf_counter() - h
        t3b = clock.mark()
        st.left_out.append((t3, t3b))
    engine.step()
    t4 = clock.mark()
    st.marks.append((t0, t1, t2, t3, t3b, t4))
    with torch.no_grad():
        hits = (out.argmax(dim=1) == y).sum()
        st.loss = loss.detach() if st.loss is None else st.loss + loss.detach()
        st.correct = hits if st.correct is None else st.correct + hits
        st.seen += y.numel()


def _record(times: StepTimes, clock: StepClock, st: _Step, begin, end, wall: float, accum: int, step: int,
            excluded_total: float, engine, counter) -> None:
    """The step's one synchronize (fetching its loss and hits), then its parts, time, loss and accuracy (and the
    counter's end of the step, after that synchronize)."""
    import torch

    loss_sum, correct = torch.stack([st.loss.double(), st.correct.double()]).tolist()  # the synchronize
    if clock.cuda:
        end.synchronize()  # done already on this stream; an engine's side streams joined it in engine.step
    times.ended.append(time.perf_counter() - excluded_total)
    sec, marks = clock.seconds, st.marks
    parts = {"data": sum(sec(m[0], m[1]) for m in marks), "forward": sum(sec(m[1], m[2]) for m in marks),
             "backward": sum(sec(m[2], m[3]) for m in marks), "optimizer": sum(sec(m[4], m[5]) for m in marks)}
    step_time = sec(begin, end) - sum(sec(a, b) for a, b in st.left_out)
    if not clock.cuda:  # the host clock: the step ends with its fetch, as it always did
        step_time = time.perf_counter() - wall - sum(b - a for a, b in st.left_out)
    times.applied.append(step_applied(engine))
    if counter is not None:
        counter.end_step()
    for name, value in (*parts.items(), ("step", step_time), ("loss", loss_sum / accum),
                        ("acc", correct / max(st.seen, 1))):
        getattr(times, name).append(value)
    if not math.isfinite(loss_sum):
        raise FloatingPointError(f"loss is {loss_sum} at step {step}")


def train(engine, batches, *, total_steps: int, accum: int, device, on_step=None, counter=None,
          on_last_step_backward=None, warmup_steps: int = 0, on_steady=None) -> StepTimes:
    """Train total_steps optimizer steps; counter (CommCounter) sees each step's collectives.

    on_last_step_backward() runs after each backward of the last step, before its engine.step: gradients
    and optimizer states both exist then (at every micro step: ZeRO-1 accumulates whole gradients until
    the boundary, ZeRO-2 partitions them as it goes). Its time is not the step's: the device is
    synchronized around it (the last step only) and the interval between its marks left out.
    on_steady() runs once, before the first steady step (warmup_steps): bench resets the device's peak
    memory statistics there, so the peak covers steady steps only.
    """
    clock = StepClock(device)
    times = StepTimes(timing=clock.how)
    stream = batches_forever(batches)
    engine.train()
    excluded_total = 0.0  # host seconds of the measurement, out of the wall-clock marks (epoch_walls)
    clock.sync()
    times.began = time.perf_counter()
    for step in range(total_steps):
        if step == warmup_steps:
            times.steady_from = step
            if on_steady is not None:
                on_steady()
        # Loss and hits stay on the device until the step ends: one fetch per step, the step's one synchronize.
        st = _Step()
        clock.begin_step()
        if counter is not None:
            counter.begin_step()
        wall = time.perf_counter()
        begin = clock.mark()
        hook = on_last_step_backward if step + 1 == total_steps else None
        for _ in range(accum):
            _micro_step(engine, stream, clock, st, hook)
        end = clock.mark()
        excluded_total += st.excluded_s
        _record(times, clock, st, begin, end, wall, accum, step, excluded_total, engine, counter)
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
