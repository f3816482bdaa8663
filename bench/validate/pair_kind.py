"""Which pairs a level's kind of pairing takes at n nodes ("all": every pair, else the ring and random matchings; "ring":
the ring, every pair at small clusters without a topology), and in words for the plan and the record. Pure;
bench.validate.pairing re-exports it."""

from __future__ import annotations

# The most nodes whose every pair the full level measures (N-1 rounds); past it, the ring and k matchings.
ALL_PAIRS_MAX = 16
# Without leaves to order it across, the ring's n pairs are a blind draw of n(n-1)/2 that misses every pair of a
# fault on 6% of them (the unhealthy H100 logs' least, ../shared/fixtures/fleets) in 29% of clusters at 17 nodes,
# 13% at 32, 4.7% at 48: up to here the ring level ("quick") measures every pair, a few seconds a round, instead.
RING_ALL_PAIRS_MAX = 48


def every_pair(kind: str, n: int, leaves: list[str | None] | None = None) -> bool:
    """Whether a level's pairs of n nodes are every pair: "all" to ALL_PAIRS_MAX, and every level without leaves to
    RING_ALL_PAIRS_MAX (three nodes' ring is every pair already): "all" never measures fewer pairs than the ring."""
    if kind != "ring" and n <= ALL_PAIRS_MAX:
        return True
    return 3 < n <= RING_ALL_PAIRS_MAX and not (leaves and len(set(leaves)) >= 2)


def describe(kind: str, n: int, matchings: int = 4, leaves: list[str | None] | None = None) -> str:
    """How first_rounds chose the pairs, for the plan and the record."""
    if n > (3 if kind == "ring" else ALL_PAIRS_MAX) and every_pair(kind, n, leaves):
        return (f"every pair (round robin: without a topology up to {RING_ALL_PAIRS_MAX} nodes, where the ring's "
                "pairs would miss a fault on 6% of them in 1 of 20 clusters or more)")
    if kind == "ring" or n < 2:
        return "ring: each node with its two neighbours"
    if n <= ALL_PAIRS_MAX:
        return f"every pair (round robin: up to {ALL_PAIRS_MAX} nodes)"
    return (f"ring + {matchings} random perfect matchings (past {ALL_PAIRS_MAX} nodes every pair would take "
            f"{n - 1 + n % 2} rounds)")


def describe_order(kind: str, n: int, leaves: list[str | None] | None, seed: int) -> str:
    """The ring's order (ring_order), for the plan and the record."""
    if n <= 3 or every_pair(kind, n, leaves):
        return "every pair: no order to choose"
    if leaves and len(set(leaves)) >= 2:
        return "across leaf switches"
    known = leaves and any(x is not None for x in leaves)
    return f"shuffled (seed {seed}), not the hostfile's: " + ("every host on one leaf switch" if known else
                                                              "no leaf switches known")
