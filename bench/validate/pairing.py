"""Which node pairs validate measures, and when: rounds of disjoint pairs (matchings), so pairs run at once.

    ring_rounds(4)        # [[(0, 1), (2, 3)], [(1, 2), (3, 0)]]: each node with both neighbours, 2 rounds
    round_robin(4)        # every pair once, 3 rounds of 2 pairs (the circle method)
    retest_rounds([1], [0, 2, 3])   # node 1 against two nodes found good: [[(1, 0)], [(1, 2)]]

Pure: indices in, pairs out. A round is a matching (no node in two pairs),
so its N/2 pairs share no node and are measured at the same time; the time
to measure grows with the rounds, not with the pairs.
"""

from __future__ import annotations


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


def first_rounds(kind: str, n: int) -> list[list[tuple[int, int]]]:
    """A level's pairs of n nodes: "ring" (each node with its two neighbours) or "all" (every pair)."""
    return ring_rounds(n) if kind == "ring" else round_robin(n)


def pair_groups(hosts: list[str], rounds: list[list[tuple[int, int]]], with_all: bool,
                ranks: dict[str, list[int]]) -> tuple[list[list[int]], list[str], list[list[int]]]:
    """(groups of global ranks, their names "a+b" and "all", rounds of group indices) for rounds of pairs
    (indices into hosts), then the whole set once (with_all)."""
    groups: list[list[int]] = []
    names: list[str] = []
    round_groups: list[list[int]] = []
    for rnd in rounds:
        ids = []
        for a, b in rnd:
            name = f"{hosts[a]}+{hosts[b]}"
            if name not in names:
                names.append(name)
                groups.append(ranks[hosts[a]] + ranks[hosts[b]])
            ids.append(names.index(name))
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
