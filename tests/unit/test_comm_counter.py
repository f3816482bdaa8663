"""bench.worker.comm_counter, from which every communication figure comes, on its own.

Each wrapped function is torch's own, bound by torch's own signature: the
byte count of every op is checked against a hand computation from the
tensors passed. Where a collective cannot run in one process (send and
recv need a peer) the stand-in carries the real function's signature and
returns what torch would (None, or a Work-like handle whose future the test
completes when it chooses, for the async timing). A real one-rank gloo
group runs the ops that can run on it, so the wrapper is seen passing
torch's results through. The group size the counter divides by is given
(the counter takes it as a function), so the bytes are those of n = 4.
"""

from __future__ import annotations

import inspect
import threading
import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol
from torch.distributed import distributed_c10d as c10d

from bench.core import collectives
from bench.worker.comm_counter import _FUNCOL, _WRAPPED, CommCounter, union_length

N = 4


def test_union_counts_overlapping_and_nested_intervals_once_and_clips_to_the_step():
    assert union_length([]) == 0.0
    assert union_length([(0.0, 1.0), (2.0, 3.0)]) == 2.0                  # disjoint
    assert union_length([(0.0, 2.0), (1.0, 3.0)]) == 3.0                  # overlapping
    assert union_length([(0.0, 4.0), (1.0, 2.0), (1.5, 3.0)]) == 4.0      # nested in one
    assert union_length([(2.0, 3.0), (0.0, 1.0), (0.5, 2.5)]) == 3.0      # unsorted, chained
    assert union_length([(0.0, 1.0), (1.0, 2.0)]) == 2.0                  # touching
    assert union_length([(-1.0, 1.0), (4.0, 9.0)], lo=0.0, hi=5.0) == 2.0  # clipped to the step
    assert union_length([(6.0, 7.0)], lo=0.0, hi=5.0) == 0.0              # wholly outside


def _stand_in(name: str, returns=None, calls: list | None = None):
    """A function with torch's own signature for `name` that returns `returns` (and calls what `calls` holds)."""
    real = getattr(c10d, name, None) or getattr(dist, name)

    def fn(*args, **kwargs):
        for inner in calls or []:
            inner()
        return returns
    fn.__signature__ = inspect.signature(real)
    fn.__name__ = name
    return fn


def _counter(timed: bool = True) -> CommCounter:
    return CommCounter(timed=timed, world_size=lambda group: N, backend="gloo")


def _args(name: str) -> tuple[tuple, int]:
    """Arguments for torch.distributed's `name` (as a rank of N would pass them), and S by hand."""
    t = torch.zeros(1000)                       # 4,000 bytes
    h = torch.zeros(250, dtype=torch.float16)   # 500 bytes
    if name in ("all_reduce", "broadcast", "reduce", "send", "isend", "recv", "irecv"):
        return (t,), 4000
    if name == "all_reduce_coalesced":
        return ([t, h],), 4500
    if name in ("all_gather_single", "all_gather_into_tensor", "_all_gather_base"):
        return (torch.zeros(4000), t), 16000     # S: the gathered output, N x the input
    if name == "all_gather":
        return ([torch.zeros(1000) for _ in range(N)], t), 16000
    if name in ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base"):
        return (t, torch.zeros(4000)), 16000     # S: the whole input
    if name == "reduce_scatter":
        return (t, [torch.zeros(1000) for _ in range(N)]), 16000
    if name == "all_to_all_single":
        return (torch.zeros(1000), t), 4000
    raise AssertionError(f"no hand computation for {name}")


@pytest.mark.parametrize("name", sorted(_WRAPPED))
def test_each_wrapped_op_counts_its_bytes_as_by_hand(name):
    if getattr(c10d, name, None) is None and getattr(dist, name, None) is None:
        pytest.skip(f"this torch has no {name}")
    args, s = _args(name)
    op = _WRAPPED[name][0]
    c = _counter()
    fn = c.wrap(name, _stand_in(name))
    c.begin_step()
    fn(*args)
    c.end_step()
    (step,) = c.per_step()
    (got,) = step["ops"].values()
    assert list(step["ops"]) == [op] and got["calls"] == 1 and got["buffer_bytes"] == s
    assert got["sent_bytes"] == pytest.approx(s * collectives.sent_factor(op, N, "gloo"))


def test_functional_collectives_count_the_gathered_size_and_their_own_group():
    sizes = []
    c = _counter()
    for name, (op, _, _, gathered) in sorted(_FUNCOL.items()):
        real = getattr(funcol, name, None)
        if real is None:
            continue

        def fn(*args, **kwargs):
            return None
        fn.__signature__ = inspect.signature(real)
        t = torch.zeros(1000)
        counted = c.wrap(name, fn, funcol_size=lambda group: sizes.append(group) or 2)
        middle = {"all_reduce": ("sum",), "all_reduce_coalesced": ("sum",), "broadcast": (0,),
                  "all_gather_single": (0,), "all_gather_tensor": (0,), "reduce_scatter_single": ("sum", 0),
                  "reduce_scatter_tensor": ("sum", 0), "all_to_all_single": (None, None)}[name]
        c.begin_step()
        counted([t, t] if name == "all_reduce_coalesced" else t, *middle, group="mesh-dim")
        c.end_step()
        got = c.per_step()[-1]["ops"][op]
        s = 8000 if name == "all_reduce_coalesced" else 4000 * (2 if gathered else 1)
        assert got["buffer_bytes"] == s and got["sent_bytes"] == pytest.approx(s * collectives.sent_factor(op, 2, "gloo"))
    assert sizes and set(sizes) == {"mesh-dim"}  # the group each call named, not the world's


def test_a_step_holds_every_micro_steps_calls_and_nothing_outside_a_step():
    c = _counter()
    fn = c.wrap("all_reduce", _stand_in("all_reduce"))
    t = torch.zeros(250)  # 1,000 bytes
    fn(t)                 # before any step (model set-up): not counted
    for _ in range(2):    # two optimizer steps of two micro steps: the boundary does not split a step
        c.begin_step()
        fn(t)             # micro step 1 (ZeRO-2 reduces every micro step)
        fn(t)             # micro step 2, at the accumulation boundary
        c.end_step()
        fn(t)             # between steps (evaluation, the gathering of figures): not counted
    steps = c.per_step()
    assert [s["ops"]["all_reduce"]["calls"] for s in steps] == [2, 2]
    assert all(s["ops"]["all_reduce"]["buffer_bytes"] == 2000 for s in steps)


def test_an_alias_that_calls_the_counted_name_is_one_collective():
    c = _counter()
    inner = c.wrap("all_gather_into_tensor", _stand_in("all_gather_into_tensor"))
    out, x = torch.zeros(4000), torch.zeros(1000)
    outer = c.wrap("_all_gather_base", _stand_in("_all_gather_base", calls=[lambda: inner(out, x)]))
    c.begin_step()
    outer(out, x)
    c.end_step()
    assert c.per_step()[0]["ops"]["all_gather"]["calls"] == 1


class _Work:
    def __init__(self) -> None:
        self.future = torch.futures.Future()

    def get_future(self):
        return self.future


def test_an_async_call_is_in_flight_until_its_future_completes():
    work = _Work()
    c = _counter()
    fn = c.wrap("all_reduce", _stand_in("all_reduce", returns=work))
    c.begin_step()
    assert fn(torch.zeros(10), async_op=True) is work  # the handle goes back to the caller untouched
    threading.Timer(0.05, lambda: work.future.set_result(None)).start()
    time.sleep(0.1)
    c.end_step()
    step = c.per_step()[0]
    # The call returned at once; the bytes moved until the future completed, 50 ms later.
    assert step["ops"]["all_reduce"]["seconds"] >= 0.045 and step["seconds"] >= 0.045
    # A handle still pending when the step ends is counted when it completes, clipped to its step.
    late = _Work()
    fn2 = c.wrap("isend", _stand_in("isend", returns=late))
    c.begin_step()
    fn2(torch.zeros(10), dst=1)
    c.end_step()
    assert c.per_step()[1]["ops"] == {}
    time.sleep(0.02)
    late.future.set_result(None)
    assert c.per_step()[1]["ops"]["send"]["calls"] == 1
    assert c.per_step()[1]["seconds"] <= 0.02  # never more than the step itself


def test_untimed_on_gpus_seconds_are_null_never_zero():
    c = _counter(timed=False)
    fn = c.wrap("all_reduce", _stand_in("all_reduce"))
    c.begin_step()
    fn(torch.zeros(10))
    c.end_step()
    step = c.per_step()[0]
    assert step["seconds"] is None and step["ops"]["all_reduce"]["seconds"] is None
    assert step["ops"]["all_reduce"]["sent_bytes"] > 0 and c.timing_reason


def test_real_collectives_pass_through_the_wrapper(one_rank_group):
    c = CommCounter(timed=True, world_size=lambda g: dist.get_world_size(g), backend="gloo")
    all_reduce = c.wrap("all_reduce", c10d.all_reduce)
    gather = c.wrap("all_gather_single", c10d.all_gather_single)
    f_all_reduce = c.wrap("all_reduce", funcol.all_reduce,
                          funcol_size=lambda g: dist.get_world_size())
    x = torch.full((8,), 3.0)
    out = torch.zeros(8)
    c.begin_step()
    all_reduce(x)
    gather(out, x)
    y = f_all_reduce(x, "sum", dist.group.WORLD)
    c.end_step()
    assert torch.equal(out, x) and torch.equal(funcol.wait_tensor(y), x)
    step = c.per_step()[0]["ops"]
    # One rank: the calls and their buffers are counted, nothing is sent (n = 1).
    assert step["all_reduce"]["calls"] == 2 and step["all_reduce"]["buffer_bytes"] == 64
    assert step["all_gather"]["buffer_bytes"] == 32 and step["all_gather"]["sent_bytes"] == 0
