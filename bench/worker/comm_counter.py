"""Every collective a training rank issues, counted per optimizer step: op, buffer bytes, calls and time.

    counter = install(device)            # before the process group exists (see why below)
    counter.begin_step(); ... train one step ...; counter.end_step()
    counter.per_step()                   # one {op: {calls, buffer_bytes, sent_bytes, seconds}} per step

How it sees them. torch.distributed's Python collectives (all_reduce,
all_gather_into_tensor, reduce_scatter_tensor, broadcast, ... and their
older aliases, and the send/recv that carry pipeline stages' activations) are wrapped, in torch.distributed and in distributed_c10d,
before the process group is created: DeepSpeed's comm layer binds its
all-gather and reduce-scatter functions when it starts (TorchBackend), and
every ZeRO stage, offload or not, reaches the wire through these functions.
The DDP baseline reduces through the same all_reduce (bench.worker.ddp
registers torch's Python allreduce hook), so both engines are counted by the
same code at the same cost. torch's functional collectives
(torch.distributed._functional_collectives), which DTensor redistributes
through, are wrapped too: FSDP2's clip_grad_norm_ all-reduces the shards'
norms that way, from C++ past the Python functions above, and DeepSpeed's
clipping all-reduce is counted, so FSDP2's must be. A functional
collective returns before its wait (the result's first use), so its
interval is the issue only. Only the outermost call counts (an alias that
calls the new name is one collective).

What it records per call: the op (bench.core.collectives' name), S (the
size nccl-tests' algbw divides by: the buffer of all_reduce and broadcast,
the gathered output of all_gather, the full input of reduce_scatter), the
group's size n, and the bytes this rank's algorithm sends, S x the
backend's factor (bench.core.collectives.SENT: nccl's ring, gloo's as
measured on a wire; docs/metrics.md, "Communication per step"), and its interval in flight on the host clock:
from the call to its return, or, for async_op=True, to the completion of the
Work's future (a callback). A step's communication time is the union of its
intervals within the step: the time at least one collective was in flight
(queued async collectives and ZeRO-3's prefetches overlap each other; a sum
would count them twice), so it never exceeds the step. On CPU/gloo completion is when the bytes have moved. On GPUs
NCCL runs on its own streams and a host clock sees the launch, not the
transfer: seconds are then None, with the reason, never 0.

Each call is also numbered, inside steps and out, in the rank's position
(bench.worker.position: step, sequence number, the collectives in flight),
which bench reads when a run hangs to say where each rank was.

A process group can be given a label (label_group: the tensor-parallel
group); each step then also sums, per label, the calls over that group
(per_step()'s "by_group"), so TP's activation all-reduces are told apart
from the data-parallel reductions of the same op.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from typing import Any, Callable

from bench.core import collectives
from bench.core.accel_names import by_device
from bench.worker.position import POSITION, Position

# torch.distributed function -> (collective, the argument that holds S, whether it is a list of tensors)
_WRAPPED: dict[str, tuple[str, str, bool]] = {
    "all_reduce": ("all_reduce", "tensor", False),
    "all_reduce_coalesced": ("all_reduce", "tensors", True),
    "broadcast": ("broadcast", "tensor", False),
    "reduce": ("reduce", "tensor", False),
    "all_gather_single": ("all_gather", "output_tensor", False),  # torch 2.14's name; FSDP2 calls it
    "all_gather_into_tensor": ("all_gather", "output_tensor", False),
    "_all_gather_base": ("all_gather", "output_tensor", False),
    "all_gather": ("all_gather", "tensor_list", True),
    "reduce_scatter_single": ("reduce_scatter", "input", False),
    "reduce_scatter_tensor": ("reduce_scatter", "input", False),
    "_reduce_scatter_base": ("reduce_scatter", "input", False),
    "reduce_scatter": ("reduce_scatter", "input_list", True),
    "all_to_all_single": ("all_to_all", "input", False),
    "send": ("send", "tensor", False),
    "isend": ("send", "tensor", False),
    "recv": ("recv", "tensor", False),
    "irecv": ("recv", "tensor", False),
}
_ASYNC = ("isend", "irecv")  # always return a Work
# torch.distributed._functional_collectives (DTensor's redistributions: FSDP2's gradient-norm all-reduce under
# clip_grad_norm_) -> (collective, the argument holding the local tensor, a list, S = n x that tensor). They reach
# the process group from C++ (torch.ops._c10d_functional), past the wrappers above.
_FUNCOL: dict[str, tuple[str, str, bool, bool]] = {
    "all_reduce": ("all_reduce", "self", False, False),
    "all_reduce_coalesced": ("all_reduce", "self", True, False),
    "broadcast": ("broadcast", "self", False, False),
    "all_gather_single": ("all_gather", "self", False, True),
    "all_gather_tensor": ("all_gather", "self", False, True),
    "reduce_scatter_single": ("reduce_scatter", "self", False, False),
    "reduce_scatter_tensor": ("reduce_scatter", "self", False, False),
    "all_to_all_single": ("all_to_all", "self", False, False),
}
FUNCOL_TIMING = ("functional collectives (DTensor's) return before their wait, which comes where the result is "
                 "first used: their interval is the issue only")
GPU_TIMING = ("on GPUs NCCL moves the bytes on its own streams, overlapped with compute: a host clock sees only "
              "the launch, so no communication time is claimed (bytes are counted exactly)")


def _nbytes(value: Any, is_list: bool) -> int:
    tensors = value if is_list else [value]
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))


class CommCounter:
    def __init__(self, timed: bool, world_size: Callable[[Any], int], backend: str = "gloo",
                 position: Position | None = None, group_name: Callable[[Any], str | None] = lambda g: None):
        self.timed = timed
        self._group_name = group_name  # a call's group argument -> the process group's name
        self._labels: dict[str, str] = {}
        self.backend = backend  # whose algorithms' sent bytes (collectives.SENT) the calls are counted with
        self.position = Position() if position is None else position
        self.timing_reason = None if timed else GPU_TIMING
        self._size = world_size
        self._lock = threading.Lock()
        self._local = threading.local()
        self._steps: list[dict[str, Any]] = []
        self._current: dict[str, Any] | None = None

    # --- step boundaries (the training loop) -----------------------------------------
    def begin_step(self) -> None:
        self.position.begin_step()
        with self._lock:
            self._current = {"ops": {}, "groups": {}, "intervals": [], "begin": time.perf_counter(), "end": None}
            self._steps.append(self._current)

    def label_group(self, group_name: str, label: str) -> None:
        """Sum the calls over the process group of that name under `label` too (per_step()'s by_group)."""
        self._labels[group_name] = label

    def end_step(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current["end"] = time.perf_counter()
            self._current = None

    def per_step(self) -> list[dict[str, Any]]:
        """Each step: {"ops": {op: {calls, buffer_bytes, sent_bytes, seconds}}, "seconds": union in flight}.

        An op's seconds add its calls' intervals; the step's seconds are their
        union. Both None where untimed (GPUs).
        """
        with self._lock:
            out = [{"ops": {op: {"calls": int(v[0]), "buffer_bytes": v[1], "sent_bytes": v[2],
                                 "seconds": v[3] if self.timed else None} for op, v in step["ops"].items()},
                    "seconds": union_length(step["intervals"], step["begin"], step["end"]) if self.timed else None}
                   for step in self._steps]
            if self._labels:
                for o, step in zip(out, self._steps):
                    o["by_group"] = {label: {"calls": int(v[0]), "buffer_bytes": v[1], "sent_bytes": v[2]}
                                     for label, v in step["groups"].items()}
            return out

    # --- the wrapper ------------------------------------------------------------------
    def _add(self, bucket: dict[str, Any] | None, op: str, s: float, sent: float, t0: float, t1: float,
             label: str | None = None) -> None:
        if bucket is None:
            return
        with self._lock:
            v = bucket["ops"].setdefault(op, [0, 0.0, 0.0, 0.0])
            v[0] += 1
            v[1] += s
            v[2] += sent
            v[3] += t1 - t0
            bucket["intervals"].append((t0, t1))
            if label is not None:
                g = bucket["groups"].setdefault(label, [0, 0.0, 0.0])
                g[0] += 1
                g[1] += s
                g[2] += sent

    def wrap(self, name: str, original: Callable, funcol_size: Callable[[Any], int] | None = None,
             funcol_group_name: Callable[[Any], str | None] | None = None) -> Callable:
        """The counted stand-in of torch.distributed's `name` (or, with funcol_size, the functional collective's)."""
        if funcol_size is None:
            op, arg, is_list = _WRAPPED[name]
            gathered, size, group_name = False, self._size, self._group_name
        else:
            op, arg, is_list, gathered = _FUNCOL[name]
            size, group_name = funcol_size, funcol_group_name or self._group_name
        sig = inspect.signature(original)
        collective = collectives.get(op)

        @functools.wraps(original)
        def counted(*args, **kwargs):
            local = self._local
            if getattr(local, "depth", 0):
                return original(*args, **kwargs)
            bound = sig.bind_partial(*args, **kwargs)
            bucket = self._current  # None outside a step: numbered in the position, not counted
            n = size(bound.arguments.get("group")) if bucket is not None else 1
            label = self._labels.get(group_name(bound.arguments.get("group"))) if self._labels and \
                bucket is not None else None
            s = _nbytes(bound.arguments.get(arg), is_list) * (n if gathered else 1) if bucket is not None else 0
            local.depth = 1
            seq = self.position.enter(op)
            t0 = time.perf_counter()
            try:
                work = original(*args, **kwargs)
            except BaseException as e:
                self.position.leave(seq, e)
                raise
            finally:
                local.depth = 0
            sent = s * collective.volume_factor(n, self.backend)
            if (bound.arguments.get("async_op") or name in _ASYNC) and work is not None and self.timed:
                def done(future) -> None:
                    try:
                        future.value()  # raises what the collective failed with (a timeout, a peer gone)
                        self.position.leave(seq)
                    except Exception as e:  # noqa: BLE001 - recorded; the waiter raises it itself
                        self.position.leave(seq, e)
                    self._add(bucket, op, s, sent, t0, time.perf_counter(), label)
                work.get_future().add_done_callback(done)
            else:
                # On GPUs an async call has left the host once it returns: the device side is the flight
                # recorder's (bench.worker.flight), not a host clock's.
                self.position.leave(seq)
                self._add(bucket, op, s, sent, t0, time.perf_counter(), label)
            return work
        return counted


def union_length(intervals: list[tuple[float, float]], lo: float = float("-inf"),
                 hi: float | None = None) -> float:
    """Total length of the union of [start, end] intervals, each clipped to [lo, hi] (a step's own time)."""
    hi = float("inf") if hi is None else hi
    total, end = 0.0, float("-inf")
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= end or b <= a:  # inside what is counted already, or (clipped) wholly outside the step
            continue
        total += b - max(a, end)
        end = b
    return total


def install(device_type: str) -> CommCounter:
    """Wrap torch.distributed's collectives (call before the process group is created)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    def group_name(group) -> str | None:
        return (group if group is not None else c10d._get_default_group()).group_name

    counter = CommCounter(timed=device_type != "cuda", world_size=lambda g: dist.get_world_size(g),
                          backend=by_device(device_type)["collective_backend"], position=POSITION,
                          group_name=group_name)
    for name in _WRAPPED:
        original = getattr(c10d, name, None) or getattr(dist, name, None)
        if original is None:
            continue
        counted = counter.wrap(name, original)
        for module in (dist, c10d):
            if getattr(module, name, None) is original:
                setattr(module, name, counted)
    from torch.distributed import _functional_collectives as funcol

    def funcol_group(group):
        g = funcol._resolve_group(group)  # a ProcessGroup, or a group's name (DeviceMesh, (mesh, dim), ...)
        return c10d._resolve_process_group(g) if isinstance(g, str) else g

    for name in _FUNCOL:
        original = getattr(funcol, name, None)
        if original is not None:  # DTensor calls funcol.<name> through the module: patched here, seen there
            setattr(funcol, name, counter.wrap(name, original, lambda g: funcol_group(g).size(),
                                               lambda g: funcol_group(g).group_name))
    return counter
