"""A bare torch.distributed loop that counts what each collective puts on this host's wire (no bench code).

    ip netns exec NS python tests/multihost/wire_loop.py RANK WORLD MASTER PORT IFACE BYTES ITERS OPS

Each op runs once untimed, then ITERS times between two barriers; the
interface's tx_bytes (/sys/class/net/IFACE/statistics/tx_bytes, read inside
the host's namespace) before and after is what this host sent. Barriers and
their TCP acknowledgements are measured apart (ITERS barriers alone) and
taken off. Prints one JSON line: {"rank", "world", "per_rank_bytes",
"iters", "tx": {op: bytes sent per iteration}}.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def tx(iface: str) -> int:
    with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
        return int(f.read())


def buffers(op: str, count: int, n: int) -> tuple:
    x = torch.ones(count)
    if op == "all_reduce":
        return (lambda: dist.all_reduce(x)),
    if op == "all_gather":
        out = torch.empty(count * n)
        return (lambda: dist.all_gather_single(out, x)),
    if op == "reduce_scatter":
        big = torch.ones(count * n)
        return (lambda: dist.reduce_scatter_single(x, big)),
    if op == "broadcast":
        return (lambda: dist.broadcast(x, src=0)),
    if op == "reduce":
        return (lambda: dist.reduce(x, dst=0)),
    if op == "send":  # rank 0 sends to rank 1, the rest look on
        rank = dist.get_rank()
        return (lambda: dist.send(x, dst=1) if rank == 0 else dist.recv(x, src=0) if rank == 1 else None),
    if op == "all_to_all":
        out = torch.empty(count)
        return (lambda: dist.all_to_all_single(out, x)),
    raise ValueError(op)


def main() -> None:
    rank, world, master, port, iface, nbytes, iters = sys.argv[1:8]
    rank, world, nbytes, iters = int(rank), int(world), int(nbytes), int(iters)
    ops = sys.argv[8].split(",")
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    count = nbytes // 4 // world * world  # all_to_all splits the buffer in `world` equal blocks

    def window(fn) -> int:
        dist.barrier()
        before = tx(iface)
        for _ in range(iters):
            fn()
        dist.barrier()
        return tx(iface) - before

    barriers = window(lambda: None)
    out = {}
    for op in ops:
        (call,) = buffers(op, count, world)
        call()  # untimed: connections and buffers set up
        out[op] = (window(call) - barriers) / iters
    print(json.dumps({"rank": rank, "world": world, "per_rank_bytes": count * 4, "iters": iters, "tx": out}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
