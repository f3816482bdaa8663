"""bench comm's process groups, made round by round and only where they are needed.

    way, why = choice(dist, device_type, bound)      # why: for the record
    made = RoundGroups(dist, groups, rounds, rank, world, how=way)
    for ri in range(len(rounds)):
        handles = made.enter(ri)     # every rank, every round: {group index: handle} of this rank's groups in it

Why not every group on every rank up front: bench validate's quick level on
1,000 nodes x 8 GPUs launches 1,001 groups (the ring's pairs, the whole set),
2,001 where the link checks share the launch (each node's own GPUs too), and
every rank made every one; on NCCL each creation splits the world's
communicator, a collective over all 8,000 ranks. A rank needs only the groups
it is in: two or three.

How, by `how` (choice() says which and why; bench comm's record keeps both):
  "split"    NCCL with a bound device and torch's split_group: one split per
             round that brings new groups (its groups are disjoint), called by
             every rank, since splitting is collective over the parent; a rank
             in none of them gets a non-member back and drops it.
  "members"  gloo, and NCCL without a bound device (torch 2.6.x-2.7.0, where
             bench binds none), on a torch that names a members-only group from
             its group counter (see Names): new_group(members,
             use_local_synchronization=True) called by the members alone, when
             their round comes.
  "world"    every rank calls new_group for every group of the round, in one
             order (the way before issue 40, by round): NCCL with a bound device
             but no split_group (a members-only new_group would split the
             world's communicator too), and any backend on a torch that names a
             members-only group from something bench cannot make agree.

A group that comes back in a later round (validate's --repeats) is made once
and reused; a group of the whole world is the default group (None).

Names. torch names a members-only group by a hash of its ranks and its own
counter of groups made (_world.group_count), which advances only on the ranks
that make one: two members whose earlier rounds put them in different numbers
of groups would hash different names, rendezvous under different store keys
and wait for each other until the timeout (seen on 3 and 4 gloo ranks). So each
member set gets its salt from the spec, which every rank reads alike: the
counter is set to base + the set's first appearance before it is made, and
left at base + the number of sets after: equal on every rank again, and past
every salt, so no group made later can take one of these names. The split
and world ways need none of this: every rank counts every creation.

Which torch salts with what (distributed_c10d._hash_ranks_to_str, read in
each wheel): 2.14.1 with _world.group_count, which _process_group_name now
advances on both paths; 2.13.0 and 2.7.1 (the Pascal image's) with
len(_world.pg_names), the groups this rank holds, which a non-member of an
earlier members-only group holds one fewer of, and which bench cannot set.
So the members-only way is taken only where hashing the same ranks under two
counter values gives two names (salted_by_counter: torch's own function,
asked, not its version read); elsewhere "world". A name that stays apart
hangs the members in gloo's connectFullMesh until the timeout (issue 48: 3
gloo ranks in a ring, round 1, on 2.13.0).
"""

from __future__ import annotations

from typing import Any

HOWS = ("split", "members", "world")


def choice(dist: Any, device_type: str, bound: bool) -> tuple[str, str]:
    """(the way this rank's groups are made, why): see the module's docstring. Every rank of a launch runs the
    same torch, so every rank chooses alike."""
    if device_type == "cuda" and bound:
        if hasattr(dist, "split_group"):
            return "split", "NCCL on a bound device: split_group, one split a round"
        return "world", "NCCL on a bound device without split_group: every rank makes every group"
    if salted_by_counter(dist):
        return "members", "this torch names a members-only group by its group counter: its members alone make it"
    return "world", ("this torch names a members-only group by something bench cannot make agree across ranks "
                     "(len(_world.pg_names) before 2.14): every rank makes every group, in one order")


def how(dist: Any, device_type: str, bound: bool) -> str:
    """Which way this rank's groups are made: choice()'s way."""
    return choice(dist, device_type, bound)[0]


def salted_by_counter(dist: Any) -> bool:
    """Whether torch's name for a members-only group follows _world.group_count: its own hash of the same ranks
    asked under two counter values (the counter put back after). False where torch has neither."""
    hashed = getattr(getattr(dist, "distributed_c10d", None), "_hash_ranks_to_str", None)
    counter = _counter(dist)
    if hashed is None or counter is None:
        return False
    before = counter.group_count
    try:
        first = hashed([0, 1])
        counter.group_count = before + 1
        return hashed([0, 1]) != first
    finally:
        counter.group_count = before


class RoundGroups:
    def __init__(self, dist: Any, groups: list[list[int]], rounds: list[list[int]], rank: int, world: int,
                 how: str):
        if how not in HOWS:
            raise ValueError(f"unknown way to make groups {how!r}: one of {', '.join(HOWS)}")
        self.dist, self.rounds, self.rank, self.how = dist, rounds, rank, how
        self.world = world
        # A group is its member set, sorted as new_group sorts it: split_group keeps the order it is given, and
        # a group's ranks are numbered (all_gather's order, broadcast's root) the same whichever way made it.
        self.keys = [tuple(sorted(g)) for g in groups]
        # Every member set that some round needs, in order of first appearance: its index is its salt.
        self.order: dict[tuple[int, ...], int] = {}
        for r in rounds:
            for gi in r:
                if len(self.keys[gi]) < world:
                    self.order.setdefault(self.keys[gi], len(self.order))
        self.made: dict[tuple[int, ...], Any] = {}
        self.calls: list[tuple[str, Any]] = []  # what this rank asked torch for, in order
        counter = _counter(dist)
        self.base = counter.group_count if counter is not None else 0
        if how == "members" and counter is not None:
            counter.group_count = self.base + len(self.order)

    def enter(self, ri: int) -> dict[int, Any]:
        """{group index: handle} for the groups of round ri this rank is in (None: the default group), each made
        here if no earlier round made it. Every rank calls it for every round: on "split" and "world" it is
        collective over the world where the round brings a new group."""
        fresh = [key for key in dict.fromkeys(self.keys[gi] for gi in self.rounds[ri])
                 if len(key) < self.world and key not in self.made]
        if self.how == "split" and fresh:
            split = [list(k) for k in fresh]
            self.calls.append(("split_group", split))
            got = self.dist.split_group(split_ranks=split)
            for key in fresh:
                self.made[key] = got if self.rank in key else None
        elif self.how == "world":
            for key in fresh:
                self.calls.append(("new_group", list(key)))
                got = self.dist.new_group(list(key))
                self.made[key] = got if self.rank in key else None
        elif self.how == "members":
            for key in fresh:
                if self.rank in key:
                    self.made[key] = self._members_only(key)
        mine = {}
        for gi in self.rounds[ri]:
            key = self.keys[gi]
            if self.rank in key:
                mine[gi] = None if len(key) >= self.world else self.made[key]
        return mine

    def _members_only(self, key: tuple[int, ...]) -> Any:
        counter = _counter(self.dist)
        if counter is not None:
            counter.group_count = self.base + self.order[key]
        self.calls.append(("new_group", list(key)))
        try:
            return self.dist.new_group(list(key), use_local_synchronization=True)
        finally:
            if counter is not None:
                counter.group_count = self.base + len(self.order)


def _counter(dist: Any) -> Any:
    """torch's record of groups made (its _world), where this torch keeps a group_count; else None."""
    world = getattr(getattr(dist, "distributed_c10d", None), "_world", None)
    return world if world is not None and hasattr(world, "group_count") else None
