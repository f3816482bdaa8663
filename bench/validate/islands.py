"""Without a topology: the nodes fall in islands when the pairs split in two modes along a cut of the nodes.

    found = find({frozenset(("a", "b")): 23.6e9, frozenset(("a", "c")): 5.4e9, ...})
    # ([["a", "b"], ["c", "d"]], 0.23, 4): two islands, the pairs between them at 23% of the others, 4 of them

Where every pair inside each island runs in the pairs' fast mode (bench.validate.norm.fast) and every pair
between islands below it, the slow pairs are no node's: they follow a cut, as two leaf switches under an
oversubscribed fabric do, or the path between two groups of nodes when it is slow. Without a topology bench
cannot tell which (a healthy 4:1 fabric looks the same), so it names the islands and what would tell them
apart, and holds no node for it. The nccl-tests logs of 17 real H100 nodes at 8 GPUs (alltoall) split so: 9 and 8
nodes, the 72 pairs between at 0.23x (benchmarks/fleet_replay.py), which the pairs' peer lines, drawn over both
modes, passed.

Pure: pairs in, islands out.
"""

from __future__ import annotations

from bench.analysis import metrics
from bench.validate import norm

LEAST_ISLAND = 2   # a node alone is the node's own links' to explain (bench.validate.blame), not an island


def find(pairs: dict[frozenset[str], float]) -> tuple[list[list[str]], float, int] | None:
    """(the islands, each sorted; the slow pairs' median over the fast pairs'; how many slow pairs) or None."""
    values = [x for x in pairs.values() if x and x > 0]
    fast = norm.fast(values)
    if len(fast) == len(values) or not fast:
        return None
    line = min(fast)
    hosts = sorted({h for p in pairs for h in p})
    parent = {h: h for h in hosts}

    def root(h: str) -> str:
        while parent[h] != h:
            parent[h] = parent[parent[h]]
            h = parent[h]
        return h
    for p, x in pairs.items():
        if x >= line:
            a, b = p
            parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for h in hosts:
        groups.setdefault(root(h), []).append(h)
    islands = sorted(groups.values(), key=lambda g: (-len(g), g))
    if len(islands) < 2 or any(len(g) < LEAST_ISLAND for g in islands):
        return None
    slow = []
    for p, x in pairs.items():
        a, b = p
        if (root(a) == root(b)) != (x >= line):  # a slow pair inside an island, or a fast one between: no cut
            return None
        if x < line:
            slow.append(x or 0.0)
    return islands, metrics.percentile(sorted(slow), 50) / metrics.percentile(sorted(fast), 50), len(slow)
