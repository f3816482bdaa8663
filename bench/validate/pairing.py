"""Which node pairs validate measures, and when: rounds of disjoint pairs (matchings), so pairs run at once.

    ring_rounds(4)        # [[(0, 1), (2, 3)], [(1, 2), (3, 0)]]: each node with both neighbours, 2 rounds
    round_robin(4)        # every pair once, 3 rounds of 2 pairs (the circle method)
    ring_and_matchings(1000, k=4, seed=1)  # the ring, then 4 seeded random perfect matchings: 6 rounds
    retest_rounds([1], [0, 2, 3])   # node 1 against two nodes found good: [[(1, 0)], [(1, 2)]]

Pure: indices in, pairs out. A round is a matching (no node in two pairs),
so its N/2 pairs share no node and are measured at the same time; the time
to measure grows with the rounds, not with the pairs.

Every pair (round_robin) is N-1 rounds: 15 at 16 nodes, 999 at 1,000, hours
of rounds of a few seconds each. Past ALL_PAIRS_MAX nodes the full level
measures the ring and k random perfect matchings instead (Imbue's host
checks for 4,092 H100s: random halves, a fixed number of rounds, a node
judged by its share of good pairs): k+2 rounds (k+3 for odd N), each node
with k+2 distinct partners (the ring's two, then one new one a matching),
chosen from a seed kept in the plan and the record, so a run is repeated
pair for pair.
"""

from __future__ import annotations

import random

# The most nodes whose every pair the full level measures (N-1 rounds); past it, the ring and k matchings.
ALL_PAIRS_MAX = 16


def ring_rounds(n: int) -> list[list[tuple[int, int]]]:
    """The ring's n edges (i, i+1 mod n) in the fewest matchings: 2 rounds for even n, 3 for odd n."""
    if n < 2:
        return []
    if n == 2:
        return [[(0, 1)]]
    even = [(i, i + 1) for i in range(0, n - 1, 2)]
    odd = [(i, (i + 1) % n) for i in range(1, n - 1 if n % 2 else n, 2)]
    rounds = [even, odd]
    if n % 2:
        rounds.append([(n - 1, 0)])
    return [r for r in rounds if r]


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of n nodes once (the circle method): n-1 rounds for even n, n for odd (one node rests)."""
    if n < 2:
        return []
    players = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(a, b) if a < b else (b, a) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]  # keep the first, rotate the rest
    return rounds


def _used(rounds: list[list[tuple[int, int]]]) -> set[frozenset[int]]:
    return {frozenset(p) for r in rounds for p in r}


def random_matching(n: int, rng: random.Random, avoid: set[frozenset[int]], rest: int | None = None,
                    tries: int = 8) -> list[tuple[int, int]]:
    """A random perfect matching of n nodes (of n-1 for odd n: `rest` sits out) that uses no pair in `avoid`
    where one can be found: a shuffle, then each pair already used swapped with a random other pair until
    neither is used (a few swaps per conflict at most: with k+2 partners taken of n-1, a pair is used with
    odds (k+2)/(n-1)). Where no swap frees it after `tries` passes (tiny n), a used pair stays."""
    nodes = [i for i in range(n) if i != rest]
    rng.shuffle(nodes)
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    for _ in range(tries):
        bad = [i for i, p in enumerate(pairs) if frozenset(p) in avoid]
        if not bad:
            break
        for i in bad:
            if frozenset(pairs[i]) not in avoid:
                continue  # freed by an earlier swap in this pass
            for j in rng.sample(range(len(pairs)), min(len(pairs), 16)):
                (a, b), (c, d) = pairs[i], pairs[j]
                if j != i and frozenset((a, c)) not in avoid and frozenset((b, d)) not in avoid:
                    pairs[i], pairs[j] = (a, c), (b, d)
                    break
    return [(a, b) if a < b else (b, a) for a, b in pairs]


def ring_and_matchings(n: int, k: int, seed: int) -> list[list[tuple[int, int]]]:
    """The ring's rounds, then k seeded random perfect matchings avoiding every pair taken before: each node
    meets its two ring neighbours and k more distinct nodes (as many as n allows). Odd n: each matching leaves
    a different node out, and that node's make-up pair goes into the ring's third round, which holds one pair
    ((n-1, 0)) and has room: k+3 rounds, every node still with k+2 partners."""
    rounds = ring_rounds(n)
    rng = random.Random(seed)
    k = min(k, max(0, n - 3))  # past n-3 the pairs left cannot make k more distinct partners for everyone
    rests = rng.sample(range(1, n - 1), k) if n % 2 and n > 3 else [None] * k
    for rest in rests:
        rounds.append(random_matching(n, rng, _used(rounds), rest=rest))
    if n % 2 and n > 3 and k:
        used, busy = _used(rounds), {0, n - 1, *rests}
        pool = [x for x in range(n) if x not in busy]
        rng.shuffle(pool)
        for r in rests:
            x = next((x for x in pool if frozenset((r, x)) not in used), None)
            if x is not None:
                pool.remove(x)
                rounds[2].append((min(r, x), max(r, x)))
    return rounds


def partners(rounds: list[list[tuple[int, int]]]) -> dict[int, set[int]]:
    """Each node's distinct partners over the rounds."""
    out: dict[int, set[int]] = {}
    for r in rounds:
        for a, b in r:
            out.setdefault(a, set()).add(b)
            out.setdefault(b, set()).add(a)
    return out


def schedule(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Pairs into rounds, greedily in order, no node twice in a round."""
    rounds: list[list[tuple[int, int]]] = []
    busy: list[set[int]] = []
    for a, b in pairs:
        for r, used in zip(rounds, busy):
            if a not in used and b not in used:
                r.append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return rounds


def retest_pairs(suspects: list[int], good: list[int], per_suspect: int = 2) -> list[tuple[int, int]]:
    """Each suspect against `per_suspect` distinct good nodes (as many as there are), spread over the good ones."""
    if not good:
        return []
    k = min(per_suspect, len(good))
    return [(s, good[(i * k + j) % len(good)]) for i, s in enumerate(suspects) for j in range(k)]


def retest_rounds(suspects: list[int], good: list[int], per_suspect: int = 2) -> list[list[tuple[int, int]]]:
    return schedule(retest_pairs(suspects, good, per_suspect))


def first_rounds(kind: str, n: int, seed: int = 1, matchings: int = 4) -> list[list[tuple[int, int]]]:
    """A level's pairs of n nodes: "ring" (each node with its two neighbours) or "all" (every pair up to
    ALL_PAIRS_MAX nodes; past it the ring and `matchings` random perfect matchings from `seed`)."""
    if kind == "ring":
        return ring_rounds(n)
    return round_robin(n) if n <= ALL_PAIRS_MAX else ring_and_matchings(n, matchings, seed)


def describe(kind: str, n: int, matchings: int = 4) -> str:
    """How first_rounds chose the pairs, for the plan and the record."""
    if kind == "ring" or n < 2:
        return "ring: each node with its two neighbours"
    if n <= ALL_PAIRS_MAX:
        return f"every pair (round robin: up to {ALL_PAIRS_MAX} nodes)"
    return (f"ring + {matchings} random perfect matchings (past {ALL_PAIRS_MAX} nodes every pair would take "
            f"{n - 1 + n % 2} rounds)")


def pair_groups(hosts: list[str], rounds: list[list[tuple[int, int]]], with_all: bool,
                ranks: dict[str, list[int]]) -> tuple[list[list[int]], list[str], list[list[int]]]:
    """(groups of global ranks, their names "a+b" and "all", rounds of group indices) for rounds of pairs
    (indices into hosts), then the whole set once (with_all)."""
    groups: list[list[int]] = []
    names: list[str] = []
    index: dict[str, int] = {}  # a name's group: a list's index() made this quadratic in the pairs
    round_groups: list[list[int]] = []
    for rnd in rounds:
        ids = []
        for a, b in rnd:
            name = f"{hosts[a]}+{hosts[b]}"
            if name not in index:
                index[name] = len(names)
                names.append(name)
                groups.append(ranks[hosts[a]] + ranks[hosts[b]])
            ids.append(index[name])
        round_groups.append(ids)
    if with_all:
        names.append("all")
        groups.append([r for h in hosts for r in ranks[h]])
        round_groups.append([len(groups) - 1])
    return groups, names, round_groups


def pair_figures(rows: list[dict]) -> tuple[dict[str, list[float]], dict[str, int]]:
    """{pair or "all": [busbw per look]}, {pair: #wrong}: the comm rows of the pairs' groups."""
    bw: dict[str, list[float]] = {}
    wrong: dict[str, int] = {}
    for r in rows:
        bw.setdefault(r["group"], []).append(r["busbw"])
        wrong[r["group"]] = wrong.get(r["group"], 0) + r["wrong"]
    return bw, wrong
