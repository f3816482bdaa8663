"""bench comm's process groups, made round by round and only where they are needed.

    made = RoundGroups(dist, groups, rounds, rank, world, how=how(dist, device_type, bound))
    for ri in range(len(rounds)):
        handles = made.enter(ri)     # every rank, every round: {group index: handle} of this rank's groups in it

Why not every group on every rank up front: bench validate's quick level on
1,000 nodes x 8 GPUs launches 1,001 groups (the ring's pairs, the whole set),
2,001 where the link checks share the launch (each node's own GPUs too), and
every rank made every one; on NCCL each creation splits the world's
communicator, a collective over all 8,000 ranks. A rank needs only the groups
it is in: two or three.

How, by `how`:
  "split"    NCCL with a bound device and torch's split_group: one split per
             round that brings new groups (its groups are disjoint), called by
             every rank, since splitting is collective over the parent; a rank
             in none of them gets a non-member back and drops it.
  "members"  gloo, and NCCL without a bound device (torch 2.6.x-2.7.0, where
             bench binds none): new_group(members, use_local_synchronization=True)
             called by the members alone, when their round comes.
  "world"    NCCL with a bound device but no split_group: a members-only
             new_group would split the world's communicator too, so every rank
             calls new_group for every group of the round (today's way, by round).

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
"""

from __future__ import annotations

from typing import Any

HOWS = ("split", "members", "world")


def how(dist: Any, device_type: str, bound: bool) -> str:
    """Which way this rank's groups are made: see the module's docstring."""
    if device_type != "cuda" or not bound:
        return "members"
    return "split" if hasattr(dist, "split_group") else "world"


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
