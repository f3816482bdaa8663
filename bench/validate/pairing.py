"""Which node pairs validate measures, and when: rounds of disjoint pairs (matchings), so pairs run at once.

    ring_rounds(4)        # [[(0, 1), (2, 3)], [(1, 2), (3, 0)]]: each node with both neighbours, 2 rounds
    round_robin(4)        # every pair once, 3 rounds of 2 pairs (the circle method)
    ring_and_matchings(1000, k=4, seed=1)  # the ring, then 4 seeded random perfect matchings: 6 rounds
    first_rounds("ring", 1000, seed=1)     # the ring in a seeded shuffle (or across leaf switches: leaves=)
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

from bench.validate.pair_kind import (ALL_PAIRS_MAX, RING_ALL_PAIRS_MAX, describe,  # noqa: F401
                                       describe_order, every_pair)



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
                    tries: int = 8, apart: list | None = None) -> list[tuple[int, int]]:
    """A random perfect matching of n nodes (of n-1 for odd n: `rest` sits out) that uses no pair in `avoid`
    (nor two nodes of the same `apart` group: a leaf switch) where one can be found: a shuffle, then each pair
    that should not be swapped with a random other pair until neither is one (a few swaps per conflict at most:
    with k+2 partners taken of n-1, a pair is used with odds (k+2)/(n-1)). Where no swap frees it after `tries`
    passes (tiny n, one big leaf), such a pair stays."""
    def bad(a: int, b: int) -> bool:
        return frozenset((a, b)) in avoid or (apart is not None and apart[a] is not None and apart[a] == apart[b])

    nodes = [i for i in range(n) if i != rest]
    rng.shuffle(nodes)
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    for _ in range(tries):
        wrong = [i for i, p in enumerate(pairs) if bad(*p)]
        if not wrong:
            break
        for i in wrong:
            if not bad(*pairs[i]):
                continue  # freed by an earlier swap in this pass
            for j in rng.sample(range(len(pairs)), min(len(pairs), 16)):
                (a, b), (c, d) = pairs[i], pairs[j]
                if j != i and not bad(a, c) and not bad(b, d):
                    pairs[i], pairs[j] = (a, c), (b, d)
                    break
    return [(a, b) if a < b else (b, a) for a, b in pairs]


def ring_and_matchings(n: int, k: int, seed: int, apart: list | None = None) -> list[list[tuple[int, int]]]:
    """The ring's rounds, then k seeded random perfect matchings avoiding every pair taken before (and, where they
    can, two nodes of one `apart` group: a leaf switch): each node meets its two ring neighbours and k more distinct
    nodes (as many as n allows). Odd n: each matching leaves a different node out, and that node's make-up pair
    goes into the ring's third round, which holds one pair ((n-1, 0)) and has room: k+3 rounds, every node still
    with k+2 partners."""
    rounds = ring_rounds(n)
    rng = random.Random(seed)
    k = min(k, max(0, n - 3))  # past n-3 the pairs left cannot make k more distinct partners for everyone
    rests = rng.sample(range(1, n - 1), k) if n % 2 and n > 3 else [None] * k
    for rest in rests:
        taken = _used(rounds)
        got = random_matching(n, rng, taken, rest=rest, apart=apart)
        if apart is not None and any(frozenset(p) in taken for p in got):  # no room: distinct partners first
            got = random_matching(n, rng, taken, rest=rest)
        rounds.append(got)
    if n % 2 and n > 3 and k:
        used, busy = _used(rounds), {0, n - 1, *rests}
        pool = [x for x in range(n) if x not in busy]
        rng.shuffle(pool)
        for r in rests:
            free = [x for x in pool if frozenset((r, x)) not in used]
            x = next((x for x in free if apart is None or apart[x] is None or apart[x] != apart[r]),
                     free[0] if free else None)
            if x is not None:
                pool.remove(x)
                rounds[2].append((min(r, x), max(r, x)))
    return rounds


def cross_order(leaves: list[str | None], seed: int | None = None) -> list[int]:
    """The nodes in an order whose neighbours hang off different leaf switches where the leaves allow: one from
    each leaf in turn (a node of unknown leaf is a leaf of its own). With a seed, each turn visits the leaves in its
    own seeded order (never the leaf the turn before ended on first), so the ring's neighbours meet many leaf
    pairs, not leaf k beside leaf k+1 in every turn: at 1,000 nodes on 32 leaves a quick ring's pairs fall on
    about 430 of the 496 leaf pairs (coverage()), where a fixed order met 32. Without one, the largest first."""
    groups: dict[object, list[int]] = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(leaf if leaf is not None else ("unknown", i), []).append(i)
    queues = sorted(groups.values(), key=len, reverse=True)
    rng = random.Random(f"leaf turns {seed}") if seed is not None else None
    order: list[int] = []
    while queues:
        if rng is not None:
            rng.shuffle(queues)
            if order and len(queues) > 1 and leaves[queues[0][0]] == leaves[order[-1]] is not None:
                queues[0], queues[1] = queues[1], queues[0]
        for q in queues:
            order.append(q.pop(0))
        queues = [q for q in queues if q]
    return order


def coverage(rounds: list[list[tuple[int, int]]], leaves: list[str | None]) -> tuple[int, int]:
    """(leaf pairs the rounds measure at least once, leaf pairs there are) over the placed leaves."""
    known = sorted({x for x in leaves if x is not None})
    seen = {frozenset((leaves[a], leaves[b])) for r in rounds for a, b in r
            if leaves[a] is not None and leaves[b] is not None and leaves[a] != leaves[b]}
    return len(seen), len(known) * (len(known) - 1) // 2


def _mapped(rounds: list[list[tuple[int, int]]], order: list[int]) -> list[list[tuple[int, int]]]:
    return [[(min(order[a], order[b]), max(order[a], order[b])) for a, b in r] for r in rounds]


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


def ring_order(n: int, seed: int, leaves: list[str | None] | None = None) -> list[int]:
    """The order the ring visits the nodes: one leaf switch after another where the leaves are known (two or
    more); else a shuffle drawn from `seed`. Never the hostfile's: a hostfile written leaf by leaf (as they
    often are) would keep nearly every ring pair inside a leaf, 968 of 1,000 at 32 nodes a leaf, and the
    uplinks would go unmeasured."""
    if leaves and len(set(leaves)) >= 2:
        return cross_order(leaves, seed)
    order = list(range(n))
    random.Random(f"ring order {seed}").shuffle(order)
    return order


def first_rounds(kind: str, n: int, seed: int = 1, matchings: int = 4,
                 leaves: list[str | None] | None = None) -> list[list[tuple[int, int]]]:
    """A level's pairs of n nodes: "ring" (each node with its two neighbours) or "all" (every pair up to
    ALL_PAIRS_MAX nodes; past it the ring and `matchings` random perfect matchings from `seed`). The ring goes
    in ring_order: with each node's leaf switch, the ring's neighbours and the matchings' partners cross
    leaves where they can, and each leaf's own ring follows (leaf_rounds): 2 or 3 rounds more, every leaf at
    once."""
    if kind != "ring" and n <= ALL_PAIRS_MAX:
        return round_robin(n)
    if n <= 3:  # the ring of three is every pair: no order to choose
        return ring_rounds(n)
    if every_pair(kind, n, leaves):
        return round_robin(n)
    order = ring_order(n, seed, leaves)
    if kind == "ring":
        across = _mapped(ring_rounds(n), order)
    else:
        apart = [leaves[i] for i in order] if leaves and len(set(leaves)) >= 2 else None
        across = _mapped(ring_and_matchings(n, matchings, seed, apart=apart), order)
    if not leaves or len(set(leaves)) < 2:
        return across
    taken = _used(across)
    inside = [[p for p in r if frozenset(p) not in taken] for r in leaf_rounds(leaves)]
    return across + [r for r in inside if r]


def leaf_rounds(leaves: list[str | None]) -> list[list[tuple[int, int]]]:
    """Each leaf switch's own ring (its nodes in order), every leaf in the same rounds: pairs that cross no uplink,
    so a node's own link is measured apart from its leaf's uplinks (the pairs across leaves judge those). A node of
    unknown leaf, or alone on its leaf, has none."""
    members: dict[str, list[int]] = {}
    for i, leaf in enumerate(leaves):
        if leaf is not None:
            members.setdefault(leaf, []).append(i)
    rounds: list[list[tuple[int, int]]] = []
    for nodes in members.values():
        for k, r in enumerate(ring_rounds(len(nodes))):
            while len(rounds) <= k:
                rounds.append([])
            rounds[k] += [(min(nodes[a], nodes[b]), max(nodes[a], nodes[b])) for a, b in r]
    return rounds


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
