"""What a sweep may run on, and the resources of one point: packed on few nodes, one node, or spread.

    pool = Pool(resources={"n1": [0, 1], "n2": [0, 1]}, hostfile=True, device="cuda")
    packed(pool, 3)     # {"n1": [0, 1], "n2": [0]}: fill a node before the next
    spread(pool, 2)     # {"n1": [0], "n2": [0]}: one slot on each of the first n nodes
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.errors import BadInput


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """What the sweep may run on."""

    resources: dict[str, list[int]]
    """host -> slot ids, in hostfile order (this node: {"localhost": [0..n-1]})."""
    hostfile: bool
    """True: points pick slots with --include specs; False: points set --gpus."""
    device: str = "cpu"

    @property
    def total(self) -> int:
        return sum(len(s) for s in self.resources.values())


def packed(pool: Pool, n: int) -> dict[str, list[int]]:
    """The first n slots in hostfile order: fill a node before the next."""
    out: dict[str, list[int]] = {}
    left = n
    for host, slots in pool.resources.items():
        if left <= 0:
            break
        take = slots[:left]
        out[host] = take
        left -= len(take)
    if left > 0:
        raise BadInput(f"--gpu-counts: {n} asked but the pool has {pool.total}")
    return out


def one_node(pool: Pool, n: int) -> dict[str, list[int]]:
    """n slots of the first node that has that many."""
    for host, slots in pool.resources.items():
        if len(slots) >= n:
            return {host: slots[:n]}
    raise BadInput(f"--gpu-counts: no host has {n} slots to pack {n} GPUs on one node")


def spread(pool: Pool, n: int) -> dict[str, list[int]]:
    """One slot on each of the first n nodes."""
    if n > len(pool.resources):
        raise BadInput(f"--gpu-counts: {n} GPUs one per node needs {n} hosts; the pool has {len(pool.resources)}")
    return {h: s[:1] for h, s in list(pool.resources.items())[:n]}


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4 ... up to n, and n itself."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


def gpu_counts(asked: tuple[int, ...] | None, pool: Pool, default: list[int]) -> list[int]:
    """The GPU counts asked for (--gpu-counts), else `default`; each checked against the pool."""
    counts = list(asked) if asked else default
    for n in counts:
        if n < 1:
            raise BadInput(f"--gpu-counts: {n} is not a count >= 1")
        if n > pool.total:
            raise BadInput(f"--gpu-counts: {n} asked but the pool has {pool.total} GPU(s)/rank(s)")
    return sorted(set(counts))
