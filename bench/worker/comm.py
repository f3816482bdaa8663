"""Rank entrypoint of `bench comm`: timed collectives with a correctness count.

Started by DeepSpeed's launcher (any of local, pdsh, openmpi, slurm) as

    python -u -m bench.worker.comm --run-dir results/<run-id>

It reads comm.json (op, sizes, iterations, groups, rounds) and plan.json, uses plain
torch.distributed (NCCL on GPUs, gloo on CPU; DeepSpeed is not needed to move
bytes), and rank 0 writes summary.json with every rank's per-iteration times
and wrong-value counts. The launcher side (bench/comm.py) turns those into
rows with bench.analysis.metrics; nothing here computes a bandwidth.

Each rank's buffer holds v(r, i) = (r + 1) + (i mod 128): small integers, so
every sum is exact in float32 and the expected result of each collective is
known exactly (bench.core.collectives, the one table of ops). After the timed
iterations the result is compared with it and the mismatches counted
(nccl-tests' #wrong). Start and end: bench.worker.bootstrap.

Timing, as nccl-tests times: a sample is k back-to-back collectives between
two synchronizes, its time divided by k, with k chosen per size so that a
sample lasts at least SAMPLE_S (synchronised collectives timed alone after
the warm-up, the fastest of three; the group's largest k, since every
member must issue as many). A 1 KiB collective alone is a launch and a
device round trip, which swamp it; k of them in a row are what the link
does. The timed collectives run on
their own results (an in-place all-reduce sums its sum again); the #wrong
check is one more collective on the restored input.

The flight recorder and the comm counter are on as in a training rank
(bench.worker.flight, comm_counter): a pair that hangs is named from every
rank's dump and collective number, not from stacks that all show the same
synchronize.

Groups are measured in rounds: the groups of one round at the same time
(disjoint: bench validate's node pairs of one matching, or every node's own
GPUs), the rounds one after another with a barrier of the whole world
between them, so a group is never measured while a group of another round
shares its links. Without "rounds", each group is a round of its own. A
round's groups are made as it comes, only where a rank needs them
(bench.worker.groups): at 1,000 nodes every rank making every group would
be thousands of world-wide collectives before the first byte is timed.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time

from bench.core import collectives
from bench.core.accel_names import by_device
from bench.core.results import write_json_atomic
from bench.worker.bootstrap import mark_started, progress, rank_main


# A sample lasts at least this long (k back-to-back collectives); k at most MAX_BACK_TO_BACK. k comes from the
# fastest of CALIBRATION synchronised collectives: one preempted on a busy node would make k 1.
SAMPLE_S = 0.005
MAX_BACK_TO_BACK = 1000
CALIBRATION = 3
# Elements built or compared at once: the check holds at most this much beside the buffers (64 MiB of float32),
# not an int64 index of n x count elements (12 GiB for an all_gather of 256M on 8 ranks, over a T4's 16 GB).
CHUNK = 1 << 24


def _period(torch, device):
    """0, 1, ..., PERIOD-1 as float32: every value of the pattern is a shift of this block."""
    return torch.arange(collectives.PERIOD, dtype=torch.float32, device=device)


def fill(torch, out, rank: int, start: int = 0):
    """out[i] = v(rank, start + i) = (rank + 1) + ((start + i) mod PERIOD), in place, float32."""
    p, count = collectives.PERIOD, out.numel()
    block = _period(torch, out.device).roll(-(start % p)) + (rank + 1)
    whole = count // p * p
    if whole:
        out[:whole].view(-1, p).copy_(block.expand(whole // p, p))
    if count > whole:
        out[whole:].copy_(block[: count - whole])
    return out


def pattern(torch, rank: int, count: int, start: int = 0, device=None):
    """v(rank, i) for i in [start, start + count), as a new float32 tensor."""
    return fill(torch, torch.empty(count, dtype=torch.float32, device=device), rank, start)


def expected(torch, op: str, members: list[int], me: int, count: int, device=None):
    """The exact result this rank must hold after `op` over `members` (global ranks), from the table."""
    parts = [pattern(torch, -1, s.count, start=s.start, device=device) * s.scale + s.offset
             for s in collectives.get(op).expected(members, me, count)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def count_wrong(torch, result, op: str, members: list[int], me: int, count: int) -> int:
    """Values of result that differ from the exact one, compared CHUNK elements at a time."""
    wrong, at = 0, 0
    scratch = torch.empty(min(CHUNK, result.numel()), dtype=torch.float32, device=result.device)
    for seg in collectives.get(op).expected(members, me, count):
        for lo in range(0, seg.count, CHUNK):
            n = min(CHUNK, seg.count - lo)
            want = fill(torch, scratch[:n], -1, seg.start + lo).mul_(seg.scale).add_(seg.offset)
            wrong += int((result[at + lo: at + lo + n] != want).sum().item())
        at += seg.count
    return wrong


def _buffers(torch, op: str, rank: int, n: int, count: int, device):
    """(pristine input, working input, output) for one size; output None for in-place ops."""
    inp, out = collectives.get(op).counts(count, n)
    src = pattern(torch, rank, inp, device=device)
    return src, src.clone(), (torch.empty(out, dtype=torch.float32, device=device) if out is not None else None)


def _named(dist, name: str, before: str):
    """torch 2.14's name for a collective, or the name it had before (in 2.14 an alias that warns on every rank)."""
    return getattr(dist, name, None) or getattr(dist, before)


def _run_op(dist, op: str, work, out, group, root: int) -> None:
    if op == "all_reduce":
        dist.all_reduce(work, group=group)
    elif op == "broadcast":
        dist.broadcast(work, src=root, group=group)
    elif op == "all_gather":
        _named(dist, "all_gather_single", "all_gather_into_tensor")(out, work, group=group)
    elif op == "reduce_scatter":
        _named(dist, "reduce_scatter_single", "reduce_scatter_tensor")(out, work, group=group)
    else:
        raise ValueError(f"unknown op {op!r}")


def back_to_back(torch, dist, one_s: float, group, device) -> int:
    """k for one size: SAMPLE_S over the time of one synchronised collective (1..MAX_BACK_TO_BACK), the largest
    over the group (a collective itself: every member must issue the same number of collectives)."""
    k = max(1, min(MAX_BACK_TO_BACK, math.ceil(SAMPLE_S / max(one_s, 1e-9))))
    agreed = torch.tensor([k], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    return int(agreed.item())


def measure_group(torch, dist, spec: dict, members: list[int], group, rank: int, device, sync,
                  progress) -> list[dict]:
    """This rank's times (one collective's, from samples of k back-to-back ones) and wrong count for every size,
    over one group it belongs to."""
    op, n = spec["op"], len(members)
    out_rows = []
    for size in spec["sizes"]:
        count = max(size // 4, 1)
        src, work, out = _buffers(torch, op, rank, n, count, device)
        for _ in range(spec["warmup"]):
            work.copy_(src)
            _run_op(dist, op, work, out, group, members[0])
        sync()
        dist.barrier(group=group)
        alone = []
        for _ in range(CALIBRATION):
            t0 = time.perf_counter()
            _run_op(dist, op, work, out, group, members[0])
            sync()
            alone.append(time.perf_counter() - t0)
        k = back_to_back(torch, dist, min(alone), group, device)
        times = []
        for _ in range(spec["iters"]):
            work.copy_(src)  # untimed: the k collectives of a sample then start from the pattern
            sync()
            t0 = time.perf_counter()
            for _ in range(k):
                _run_op(dist, op, work, out, group, members[0])
            sync()
            times.append((time.perf_counter() - t0) / k)
            # A 256M all_gather on 32 nodes over 10 GbE takes seconds an iteration: say so each time, so the
            # watchdog sees a slow but healthy run making progress, not a hung one.
            progress(size, final=False)
        work.copy_(src)  # the check's own collective, on the pattern (the timed ones ran on their results)
        _run_op(dist, op, work, out, group, members[0])
        sync()
        result = out if out is not None else work
        wrong = count_wrong(torch, result, op, members, rank, count)
        out_rows.append({"size": size, "count": count, "times_s": times, "back_to_back": k, "wrong": wrong})
        progress(size)
    return out_rows


class _Progress:
    """Progress for bench's watchdog (bench.worker.bootstrap.progress): each group's first member reports (at most
    once a second within a size), since rank 0 may wait at the barrier while a round it is not in is measured."""

    def __init__(self, run_dir: str, total: int):
        self.run_dir, self.total, self.done, self.last = run_dir, total, 0, 0.0

    def __call__(self, size: int, final: bool = True, writer: bool = True) -> None:
        self.done += final
        if writer and (final or time.time() - self.last >= 1.0):
            self.last = time.time()
            progress(self.run_dir, {"step": self.done, "total": self.total, "loss": 0.0, "size": size,
                                    "time": self.last})


def _measure_rounds(torch, dist, spec: dict, groups: list[list[int]], rounds: list[list[int]], made, rank: int,
                    device, sync, progress: _Progress) -> list[dict]:
    """This rank's rows, round by round: each group of a round measures at once, the rounds one after another;
    made (bench.worker.groups.RoundGroups) makes a round's groups as it comes."""
    mine = []
    for ri, round_groups in enumerate(rounds):
        handles = made.enter(ri)  # every rank: on NCCL a round's new groups are split from the world's
        gi = next((g for g in round_groups if g in handles), None)
        if gi is not None:
            members = groups[gi]
            first = rank == members[0]
            rows = measure_group(torch, dist, spec, members, handles[gi], rank, device, sync,
                                 lambda size, final=True, first=first: progress(size, final, first))
            mine.append({"group": gi, "round": ri, "rows": rows})
        else:
            progress.done += len(spec["sizes"])
        # Rounds run one after another: a group never shares its links with one of another round.
        dist.barrier()
    return mine


def run(run_dir: str) -> dict:
    import torch
    import torch.distributed as dist

    from bench.worker import comm_counter, flight
    from bench.worker.dist import bound_device, init
    from bench.worker.groups import RoundGroups, choice

    with open(os.path.join(run_dir, "comm.json")) as f:
        spec = json.load(f)
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    if plan.get("numerics"):
        from bench.worker.numerics import before_group
        before_group(run_dir, plan)
    # Before the group exists, as in a training rank (bench.worker.main.setup): the recorder reads its settings
    # when a group is made; the counter numbers every collective for bench's stack request.
    flight.enable(run_dir)
    comm_counter.install(plan["device"])
    world, rank, local, device = init(plan, via_deepspeed=False)
    backend = by_device(device.type)["collective_backend"]
    if device.type == "cuda":
        sync, name = torch.cuda.synchronize, torch.cuda.get_device_name(device)
    else:
        sync, name = (lambda: None), "cpu"
    groups = spec.get("groups") or [list(range(world))]
    rounds = spec.get("rounds") or [[gi] for gi in range(len(groups))]
    way, why = choice(dist, device.type, bool(bound_device(torch, device)))
    made = RoundGroups(dist, groups, rounds, rank, world, way)
    mark_started(run_dir, rank)
    mine = _measure_rounds(torch, dist, spec, groups, rounds, made, rank, device, sync,
                           _Progress(run_dir, len(rounds) * len(spec["sizes"])))
    rec = {"rank": rank, "host": socket.gethostname(), "device": name, "status": "ok", "groups": mine}
    write_json_atomic(os.path.join(run_dir, "ranks", f"rank{rank}.json"), rec)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, rec)
    if rank == 0:
        write_json_atomic(os.path.join(run_dir, "summary.json"), {
            "world_size": world, "backend": backend, "groups": groups, "rounds": rounds, "ranks": gathered,
            "groups_made": {"how": way, "why": why}, "versions": _versions(torch)})
    dist.barrier()
    dist.destroy_process_group()
    return rec


def _versions(torch) -> dict:
    from importlib import metadata

    def v(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - NCCL may be absent from a CPU build
            nccl = None
    return {"torch": torch.__version__, "deepspeed": v("deepspeed"), "timm": v("timm"),
            "cuda": torch.version.cuda, "nccl": nccl, "python": sys.version.split()[0]}


def main(argv: list[str] | None = None) -> int:
    def one(run_dir: str, rank: int) -> str:
        rec = run(run_dir)
        wrong = sum(r["wrong"] for g in rec["groups"] for r in g["rows"])
        return f"{'OK' if wrong == 0 else 'broken'}: {wrong} wrong value(s)"
    return rank_main("bench.worker.comm", one, argv)


if __name__ == "__main__":
    sys.exit(main())
