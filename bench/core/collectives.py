"""The collectives bench knows, one entry each, in the style of nccl-tests' per-collective struct.

    from bench.core.collectives import COLLECTIVES, get
    c = get("all_gather")
    c.busbw_factor(8)              # 0.875: (n-1)/n
    c.nccl_bytes(4 << 20, 8)       # 32 MiB: the size S algbw divides by
    c.counts(1024, 8)              # (input elements, output elements or None when in place)
    c.expected([0, 1, 2], me=1, count=4)   # segments of the exact result (see Segment)
    c.volume_factor(8, "gloo")     # bytes a rank's algorithm sends per byte of S (SENT, below)

For each op: the bus-bandwidth factor (nccl-tests' doc/PERFORMANCE.md), the
size S that algbw divides by, the buffer sizes a rank holds, and the exact
result a rank must hold when every rank r sends v(r, i) = (r + 1) + (i mod
PERIOD). Small integers, so every sum is exact in float32 and a #wrong count
(nccl-tests' correctness column) needs no tolerance. The table is pure
Python: the comm ranks build tensors from it (bench/worker/comm.py), the
analysis computes algbw and busbw from it (bench/analysis/metrics.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

PERIOD = 128


@dataclass(frozen=True, slots=True)
class Segment:
    """`count` values of the result: scale * (i mod PERIOD) + offset for i from `start`.

    A rank's result is its segments concatenated. With every rank sending
    v(r, i) = (r + 1) + (i mod PERIOD), a sum over n ranks is n * (i mod
    PERIOD) + sum(r + 1), and a copy of rank r's buffer is 1 * (i mod PERIOD)
    + (r + 1).
    """

    start: int
    count: int
    scale: int
    offset: int


@dataclass(frozen=True, slots=True)
class Collective:
    name: str
    factor: Callable[[int], float]
    """busbw = algbw * factor(n)."""
    gathered: bool
    """True when S is n times one rank's buffer (all_gather's output, reduce_scatter's input)."""
    in_place: bool
    """The result overwrites the input (all_reduce, broadcast)."""
    in_ranks: bool
    """The input holds n blocks (reduce_scatter); else one."""
    measured: bool
    """bench comm times it (the worker has a call for it)."""

    def busbw_factor(self, n: int) -> float:
        return self.factor(n)

    def volume_factor(self, n: int, backend: str = "nccl") -> float:
        """What a rank's algorithm sends per byte of S in a group of n on `backend` (SENT): its share of the traffic."""
        return sent_factor(self.name, n, backend)

    def nccl_bytes(self, per_rank_bytes: float, n: int) -> float:
        """S for algbw = S / t: nccl-tests' size for this op from one rank's buffer bytes."""
        return per_rank_bytes * n if self.gathered else per_rank_bytes

    def counts(self, count: int, n: int) -> tuple[int, int | None]:
        """(input elements, output elements or None in place) of one rank for a per-rank count."""
        inp = count * n if self.in_ranks else count
        if self.in_place:
            return inp, None
        return inp, count * n if self.name == "all_gather" else count

    def rank_bytes(self, per_rank_bytes: int, n: int) -> int:
        """Device bytes one bench comm rank holds for a size: a pristine and a working input, and the output
        (float32, bench.worker.comm._buffers): 2 x n + 1 buffers for reduce_scatter, n + 2 for all_gather."""
        inp, out = self.counts(per_rank_bytes // 4, n)
        return 4 * (2 * inp + (out or 0))

    def expected(self, members: list[int], me: int, count: int) -> list[Segment]:
        """The exact result rank `me` holds after this op over `members` (global ranks, root first)."""
        n, total = len(members), sum(r + 1 for r in members)
        if self.name == "all_reduce":
            return [Segment(0, count, n, total)]
        if self.name == "all_gather":
            return [Segment(0, count, 1, r + 1) for r in members]
        if self.name == "reduce_scatter":
            return [Segment(members.index(me) * count, count, n, total)]
        if self.name == "broadcast":
            return [Segment(0, count, 1, members[0] + 1)]
        raise ValueError(f"{self.name}: no exact result is defined")


_RING = lambda n: (n - 1) / n  # noqa: E731 - the (n-1)/n of a ring: each rank sends all but its own part
_TWICE = lambda n: 2 * (n - 1) / n  # noqa: E731 - a ring all-reduce: reduce-scatter, then all-gather
_ONE, _NONE = (lambda n: 1.0), (lambda n: 0.0)
_TABLE = (
    Collective("all_reduce", _TWICE, gathered=False, in_place=True, in_ranks=False, measured=True),
    Collective("all_gather", _RING, gathered=True, in_place=False, in_ranks=False, measured=True),
    Collective("reduce_scatter", _RING, gathered=True, in_place=False, in_ranks=True, measured=True),
    Collective("broadcast", _ONE, gathered=False, in_place=True, in_ranks=False, measured=True),
    # Known to the formulas (training issues them, a trace may hold them), not timed by bench comm.
    Collective("reduce", _ONE, gathered=False, in_place=True, in_ranks=False, measured=False),
    Collective("all_to_all", _RING, gathered=False, in_place=False, in_ranks=False, measured=False),
    # Point to point (pipeline stages' activations and their gradients): the sender moves S, the receiver none.
    Collective("send", _ONE, gathered=False, in_place=True, in_ranks=False, measured=False),
    Collective("recv", _ONE, gathered=False, in_place=True, in_ranks=False, measured=False),
)

# Bytes one rank's algorithm sends per byte of S, on average over the group: "sent by the algorithm",
# S x SENT[backend][op](n), which is what bench's communication figures count (docs/metrics.md). It is no
# wire count: a NIC's counters see more (headers) and less (what stays on a host). One table, checked
# against the wire by tests/multihost/test_wire.py, where the OS can count it.
#   nccl  the ring algorithm's, which nccl-tests' bus bandwidth assumes; a broadcast or reduce passes S
#         along the ring, n-1 of the n ranks sending it once. Not measured here (no GPU); NCCL may pick a
#         tree, NVLS or CollNet instead, which send other amounts.
#   gloo  measured on the veth counters of namespace hosts, 8 MB per rank, n = 2 and 3 (1.001-1.009x of
#         these, the rest TCP/IP headers): its reduce_scatter all-reduces the whole input (each rank keeps
#         its block: 2(n-1)/n, not the ring's (n-1)/n), its reduce sends S per rank on average, its
#         broadcast sends S from the root to each rank ((n-1)/n on average, all of it from the root).
SENT: dict[str, dict[str, Callable[[int], float]]] = {
    "nccl": {"all_reduce": _TWICE, "all_gather": _RING, "reduce_scatter": _RING, "broadcast": _RING,
             "reduce": _RING, "all_to_all": _RING, "send": _ONE, "recv": _NONE},
    "gloo": {"all_reduce": _TWICE, "all_gather": _RING, "reduce_scatter": _TWICE, "broadcast": _RING,
             "reduce": _ONE, "all_to_all": _RING, "send": _ONE, "recv": _NONE},
}


def sent_factor(op: str, n: int, backend: str) -> float:
    """SENT[backend][op](n); ValueError naming what is known for an unknown backend or op."""
    if backend not in SENT:
        raise ValueError(f"backend: no sent-bytes factors for {backend!r}; known: {', '.join(SENT)}")
    if op not in SENT[backend]:
        raise ValueError(f"op: unknown collective {op!r}; known: {', '.join(SENT[backend])}")
    return SENT[backend][op](n) if n > 1 else 0.0
COLLECTIVES: dict[str, Collective] = {c.name: c for c in _TABLE}
MEASURED: tuple[str, ...] = tuple(c.name for c in _TABLE if c.measured)


def get(op: str) -> Collective:
    """The table entry of op; ValueError naming the known ones."""
    try:
        return COLLECTIVES[op]
    except KeyError:
        raise ValueError(f"op: unknown collective {op!r}; known: {', '.join(COLLECTIVES)}") from None
