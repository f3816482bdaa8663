"""bench comm's process groups (bench.worker.groups): which rank asks torch for which group, when, and how.

No torch here: each rank is a recording stand-in for torch.distributed that keeps torch's own rules where they
decide the outcome: a members-only new_group returns at once on a non-member without counting, every other
creation advances the rank's group counter, and a members-only group's name hashes its ranks with a salt
(distributed_c10d._hash_ranks_to_str), so members whose salts differ would never meet. The salt is torch
2.14.1's (its group counter) or, with salt="pg_names", 2.13.0's and 2.7.1's (len(_world.pg_names): the groups
this rank holds). tests/multiproc/test_groups_older_torch.py runs the same on real gloo ranks of torch 2.13.0.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.validate import pairing
from bench.worker.groups import RoundGroups, choice, how

NON_MEMBER = object()


class FakeDist:
    def __init__(self, rank: int, split: bool = True, counter: bool = True, salt: str = "counter"):
        self.rank, self.salt = rank, salt
        self.count = SimpleNamespace(group_count=1)  # torch's, after init_process_group named the world group
        self.held = 1  # len(_world.pg_names): the groups this rank holds, the world's first
        if counter:
            self.distributed_c10d = SimpleNamespace(_world=self.count, _hash_ranks_to_str=self._hash)
        if split:
            self.split_group = self._split
        self.calls: list[tuple] = []

    def _hash(self, ranks):
        return ("hash", tuple(ranks), self.count.group_count if self.salt == "counter" else self.held)

    def new_group(self, ranks, use_local_synchronization=False):
        ranks = sorted(ranks)
        if use_local_synchronization and self.rank not in ranks:
            return NON_MEMBER
        name = self._hash(ranks) if use_local_synchronization else str(self.count.group_count)
        self.count.group_count += 1
        self.held += self.rank in ranks
        self.calls.append(("new_group", ranks, use_local_synchronization))
        return SimpleNamespace(name=name) if self.rank in ranks else NON_MEMBER

    def _split(self, split_ranks):
        mine = next((s for s in split_ranks if self.rank in s), split_ranks[0])
        name = ("hash", tuple(mine), self.count.group_count)
        self.count.group_count += 1
        self.calls.append(("split_group", split_ranks))
        return SimpleNamespace(name=name) if self.rank in mine else NON_MEMBER


# 6 ranks. Round 0: A and B; round 1: C, whose rank 1 made A before and whose rank 4 made nothing; round 2: A
# again (validate's --repeats); round 3: the whole world. B's members come unsorted, as validate's ring pair
# (last node, first node) does.
GROUPS = [[0, 1], [3, 2], [1, 4], list(range(6))]
ROUNDS = [[0, 1], [2], [0], [3]]


def run_all(way: str, **fake) -> tuple[dict[int, FakeDist], dict[int, list[dict]]]:
    dists, seen = {}, {}
    for rank in range(6):
        d = dists[rank] = FakeDist(rank, **fake)
        made = RoundGroups(d, GROUPS, ROUNDS, rank, 6, way)
        seen[rank] = [made.enter(ri) for ri in range(len(ROUNDS))]
    return dists, seen


def names_by_group(seen: dict[int, list[dict]]) -> dict[int, set]:
    out: dict[int, set] = {}
    for rounds in seen.values():
        for handles in rounds:
            for gi, h in handles.items():
                out.setdefault(gi, set()).add(None if h is None else h.name)
    return out


def test_gloo_members_alone_make_each_group_once_when_its_round_comes_and_agree_on_its_name():
    dists, seen = run_all("members")
    assert {r: d.calls for r, d in dists.items()} == {
        0: [("new_group", [0, 1], True)],
        1: [("new_group", [0, 1], True), ("new_group", [1, 4], True)],
        2: [("new_group", [2, 3], True)],
        3: [("new_group", [2, 3], True)],
        4: [("new_group", [1, 4], True)],
        5: [],  # in the whole world only: the default group
    }
    # Each rank gets its own group of each round, the repeated one the very handle made in round 0.
    assert [sorted(h) for h in seen[1]] == [[0], [2], [0], [3]] and seen[1][2][0] is seen[1][0][0]
    assert seen[5] == [{}, {}, {}, {3: None}]
    # One name per group across its members (C too, though rank 1 had made a group before and rank 4 none)...
    names = names_by_group(seen)
    assert all(len(n) == 1 for n in names.values())
    # ... every rank's counter equal again, for any group the whole world makes later, and past every count the
    # groups were named with, so no later group of the same ranks can take one of their names.
    assert {d.count.group_count for d in dists.values()} == {1 + 3}
    assert sorted(next(iter(names[gi]))[2] for gi in (0, 1, 2)) == [1, 2, 3]


def test_torch_s_own_counter_alone_would_name_a_group_differently_on_its_members():
    # Why the module sets the counter: without it (a torch with no _world.group_count to set), C's members hash
    # different counts and would wait for each other until the timeout (seen on real gloo ranks).
    _, seen = run_all("members", counter=False)
    assert len(names_by_group(seen)[2]) == 2


def test_on_a_torch_that_salts_with_its_groups_held_members_alone_would_hang_and_every_rank_makes_every_group():
    """torch 2.13.0 and 2.7.1 (the Pascal image's) hash a members-only group's ranks with len(_world.pg_names):
    C's rank 1 holds A, its rank 4 nothing, and no counter bench sets changes that."""
    _, seen = run_all("members", salt="pg_names")
    assert len(names_by_group(seen)[2]) == 2
    assert how(FakeDist(0, salt="pg_names"), "cpu", False) == "world"
    assert how(FakeDist(0, salt="pg_names"), "cuda", False) == "world"  # NCCL unbound (torch 2.6.1-2.7.0) alike
    assert "pg_names" in choice(FakeDist(0, salt="pg_names"), "cpu", False)[1]
    dists, seen = run_all("world", salt="pg_names")
    assert all(len(names) == 1 for names in names_by_group(seen).values())
    for d in dists.values():  # every rank, every group, one order
        assert [c[1] for c in d.calls] == [[0, 1], [2, 3], [1, 4]]
    probe = FakeDist(0)
    assert how(probe, "cpu", False) == "members" and probe.count.group_count == 1  # asked, and put back


def test_nccl_splits_each_round_that_brings_new_groups_once_on_every_rank():
    dists, seen = run_all("split")
    for d in dists.values():  # rounds 2 (A again) and 3 (the world) split nothing
        assert d.calls == [("split_group", [[0, 1], [2, 3]]), ("split_group", [[1, 4]])]
    assert all(len(names) == 1 for names in names_by_group(seen).values())
    assert seen[1][2][0] is seen[1][0][0] and seen[5] == [{}, {}, {}, {3: None}]
    assert {d.count.group_count for d in dists.values()} == {1 + 2}


def test_nccl_without_split_group_has_every_rank_make_every_group_in_one_order():
    dists, seen = run_all("world", split=False)
    for d in dists.values():
        assert d.calls == [("new_group", [0, 1], False), ("new_group", [2, 3], False), ("new_group", [1, 4], False)]
    assert all(len(names) == 1 for names in names_by_group(seen).values())


def test_the_way_follows_the_backend_the_bound_device_and_the_torch():
    assert how(FakeDist(0), "cuda", True) == "split"
    assert how(FakeDist(0, split=False), "cuda", True) == "world"  # a members-only group would split the world's
    assert how(FakeDist(0), "cuda", False) == "members"  # torch 2.6.x-2.7.0: no bound device, nothing to split
    assert how(FakeDist(0), "cpu", False) == "members"
    assert how(FakeDist(0, counter=False), "cpu", False) == "world"  # no hash to ask: the way that cannot hang
    with pytest.raises(ValueError, match="unknown way"):
        RoundGroups(FakeDist(0), GROUPS, ROUNDS, 0, 6, "all")


@pytest.mark.parametrize("way", ["members", "split"])
def test_a_rank_of_1000_nodes_makes_three_groups_not_two_thousand(way):
    # bench validate's quick level with both link checks (bench.validate.links.with_pairs) on 1,000 nodes of 8
    # GPUs, --repeats 2: every node's own GPUs, then the ring's pairs twice, then the whole set.
    hosts = [f"n{i}" for i in range(1000)]
    ranks = {h: list(range(8 * i, 8 * i + 8)) for i, h in enumerate(hosts)}
    groups, _names, rounds = pairing.pair_groups(hosts, pairing.ring_rounds(1000) * 2, True, ranks)
    base = len(groups)
    groups += [ranks[h] for h in hosts]
    rounds = [list(range(base, len(groups))), *rounds]
    world = 8000
    assert len(rounds) == 6 and sum(len(g) < world for g in groups) == 2000  # what every rank made before
    for rank in (0, 7, 8, 4003, 7992, 7999):  # the first node, its neighbour, one inside, the ring's last pair
        d = FakeDist(rank)
        made = RoundGroups(d, groups, rounds, rank, world, way)
        handles = [made.enter(ri) for ri in range(len(rounds))]
        assert all(len(h) == 1 for h in handles)  # one group of each round, the world's among them
        assert list(handles[-1].values()) == [None]  # the whole set: the default group
        if way == "members":
            mine = [c[1] for c in d.calls]
            assert len(mine) == 3 and all(rank in m for m in mine) and all(c[2] for c in d.calls)
        else:  # the nodes' round and the ring's two: the repeats and the whole set split nothing
            assert [c[0] for c in d.calls] == ["split_group"] * 3
            assert [len(c[1]) for c in d.calls] == [1000, 500, 500]
