"""How long bench comm's ranks take to set up validate's ring pairs: every rank making every group (before) against
bench.worker.groups (after: each round's groups made as it comes, by their members alone), on N loopback gloo ranks.

    .venv/bin/python benchmarks/comm_groups.py --sizes 4,8,16,32,64 --rounds 5 --world-barrier

N ranks in a ring, the pairs (i, i+1 mod N) in bench validate's 2 rounds of disjoint pairs
(bench.validate.pairing.ring_rounds); each pair a group of 2 ranks, N groups in all. Timed on every rank from a
barrier just after init_process_group to the moment it holds the handles of all its rounds; the figure is the
slowest rank's. "before" is what bench comm did (new_group(g) for every group, on every rank, in order); "after"
is RoundGroups.enter round after round, with no measurement in between (the rounds' own barrier is not set-up).
Also per rank: new_group calls, and groups it is a member of. On gloo a non-member's new_group only names the
group, so "before" costs little here; on NCCL each one splits the world's communicator, a collective over every
rank, which no CPU can show. --world-barrier adds the nearest stand-in: "before" with torch's own
TORCH_DIST_INIT_BARRIER=1, a store barrier of the whole world after each new_group (a world-wide rendezvous per
group, not NCCL's cost). Ranks are forked from one process that imported torch once (a fresh import costs 1.3
CPU-s and 0.65 GB resident here, 64 times over), one compute thread each; the arms alternate (A B C, C B A, ...)
and each call is a fresh world on a fresh port. The median over the rounds is printed per N with the load average;
the command above takes ~3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import free_port, load, machine, parse_smoke, pin_threads  # noqa: E402

pin_threads(1)

import torch  # noqa: E402,F401 - imported once here, inherited by every forked rank
import torch.distributed as dist  # noqa: E402

from bench.validate.pairing import pair_groups, ring_rounds  # noqa: E402
from bench.worker.groups import RoundGroups  # noqa: E402


def layout(n: int) -> tuple[list[list[int]], list[list[int]]]:
    """(groups, rounds of group indices) of the ring's pairs, one rank per node, as bench validate builds them."""
    hosts = [f"n{i}" for i in range(n)]
    groups, _names, rounds = pair_groups(hosts, ring_rounds(n), False, {h: [i] for i, h in enumerate(hosts)})
    return groups, rounds


def _rank(arm: str, rank: int, n: int, port: int, out) -> None:
    import datetime

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if arm == "world-barrier":
        os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
    calls = [0]
    real = dist.new_group

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    dist.new_group = counted
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=300))
    groups, rounds = layout(n)
    dist.barrier()
    t0 = time.perf_counter()
    if arm in ("before", "world-barrier"):
        handles = [dist.new_group(g) if len(g) < n else None for g in groups]
        member = sum(rank in g for g in groups)
    else:
        made = RoundGroups(dist, groups, rounds, rank, n, "members")
        handles = [made.enter(ri) for ri in range(len(rounds))]
        member = sum(len(h) for h in handles)
    took = time.perf_counter() - t0
    out.put((rank, took, calls[0], member))
    dist.barrier()  # no rank tears its groups down while a peer still connects to it
    dist.destroy_process_group()


def one(arm: str, n: int) -> tuple[float, int, int]:
    """(slowest rank's set-up seconds, new_group calls per rank, groups a rank is in) of one fresh world."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(arm, r, n, port, out)) for r in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=600) for _ in range(n)]
    for p in procs:
        p.join(timeout=120)
        if p.exitcode != 0:
            raise SystemExit(f"{arm} N={n}: rank exited with {p.exitcode}")
    calls = {c for _, _, c, _ in got}
    member = {m for _, _, _, m in got}
    if len(calls) != 1 or len(member) != 1:
        raise SystemExit(f"{arm} N={n}: ranks differ: calls {calls}, member of {member}")
    return max(t for _, t, _, _ in got), calls.pop(), member.pop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4,8,16,32,64", help="numbers of ranks, comma-separated, one after another")
    p.add_argument("--rounds", type=int, default=3, help="worlds per arm and size (the arms alternate)")
    p.add_argument("--world-barrier", action="store_true",
                   help="a third arm: before, each new_group followed by torch's store barrier of the whole world")
    args = parse_smoke(p, argv, dict(sizes="4", rounds=1, world_barrier=True))
    print(machine())
    arms = ("before", "after") + (("world-barrier",) if args.world_barrier else ())
    print(f"{'N':>3} {'arm':>13} {'median s':>9} {'min s':>7} {'max s':>7} {'new_group calls/rank':>21} "
          f"{'member of':>9}  load (1 min) after each round")
    for n in (int(x) for x in args.sizes.split(",")):
        times: dict[str, list[float]] = {a: [] for a in arms}
        counts: dict[str, tuple[int, int]] = {}
        loads = []
        for r in range(args.rounds):
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                took, calls, member = one(arm, n)
                times[arm].append(took)
                counts[arm] = (calls, member)
            loads.append(load())
        for arm in arms:
            t = times[arm]
            print(f"{n:>3} {arm:>13} {statistics.median(t):9.3f} {min(t):7.3f} {max(t):7.3f} {counts[arm][0]:>21} "
                  f"{counts[arm][1]:>9}  {', '.join(f'{x:.2f}' for x in loads)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
