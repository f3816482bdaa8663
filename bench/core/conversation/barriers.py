"""The start barriers bench's hub holds for one launch (bench.core.conversation): who is in, when each goes.

    b = Barriers(world=8, plan={"steps": True})            # bench.core.conversation.planned: name -> per_rank
    why = b.enter("steps", rank, conn=c)                    # not None: already released, go at once; Refused
    for name, why, conns in b.judge(started=len(ranks), last_hello=t): ...   # released now: tell each conn
    b.ended_now(rank)                                       # a rank that said done, or whose connection closed

A barrier's name, count and per-rank-ness are bench's plan, never what a
rank said: the world for a per-rank barrier, 1 for one that rank 0 enters
for its run (a launch is one run); a name the plan lacks is refused to the
rank that entered it, and nothing else changes. It is released once `count` ranks entered or ended (a rank that ended
before it entered counts in, so nobody waits for it), or, per rank, once
every rank that said hello is in and none said hello for QUIET_S (ranks
that never started); after that the launch is settled and its later
barriers do not wait for them again. A connection waits once however often
its rank enters. A hub without a plan (tests, benchmarks) takes any name
as a per-rank barrier, at most RANK_SHARE created by one rank and
MAX_BARRIERS in all, each refusal for the entering rank alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench.core import conversation as talk

RANK_SHARE = 8  # without a plan, the barriers one rank may create (a launch's real ones: a few, bench.worker)


@dataclass
class Barrier:
    count: int
    per_rank: bool
    entered: set[int] = field(default_factory=set)
    ended_in: int = 0  # entered ranks that have since ended (kept as ranks end: no rescan of every rank per look)
    waiting: dict[int, Any] = field(default_factory=dict)  # rank -> its connection
    released: str | None = None


class Refused(Exception):
    """A barrier this rank cannot enter: not in bench's plan (or, without a plan, past its share of MAX_BARRIERS)."""


class Barriers:
    def __init__(self, world: int, plan: dict[str, bool] | None = None):
        """plan: each barrier's name -> per_rank (bench.core.conversation.planned), the only ones ranks may enter;
        None (a hub opened without a plan: tests, benchmarks): any name, every one per rank, each rank creating at
        most RANK_SHARE of MAX_BARRIERS."""
        self.world, self.planned = world, plan is not None
        self.all: dict[str, Barrier] = {name: Barrier(world if per_rank else 1, per_rank)
                                        for name, per_rank in (plan or {}).items()}
        self._made: dict[int, int] = {}  # without a plan: how many barriers each rank created
        self.ended: set[int] = set()  # ranks that said done, or whose connection closed first
        self.settled_at: int | None = None  # how many ranks had said hello when the launch settled

    def ended_now(self, rank: int) -> None:
        if rank not in self.ended:
            self.ended.add(rank)
            for b in self.all.values():
                b.ended_in += rank in b.entered

    def enter(self, name: str, rank: int, conn: Any) -> str | None:
        """The rank is at barrier `name`; why it was released, if it already was (else conn waits for judge).
        Refused: one it cannot enter (for it alone: no other rank's barrier changes)."""
        if (b := self.all.get(name)) is None:
            if self.planned:
                raise Refused(f"barrier {name[:80]!r} is not in bench's plan for this launch")
            if self._made.get(rank, 0) >= RANK_SHARE or len(self.all) >= talk.MAX_BARRIERS:
                raise Refused(f"barrier {name[:80]!r}: over {RANK_SHARE} barriers from this rank, or "
                              f"{talk.MAX_BARRIERS} in the launch")
            self._made[rank] = self._made.get(rank, 0) + 1
            b = self.all[name] = Barrier(self.world, True)
        if (b.per_rank or rank == 0) and rank not in b.entered:
            b.entered.add(rank)
            b.ended_in += rank in self.ended
        if b.released is None:
            b.waiting[rank] = conn
        return b.released

    def judge(self, started: int, last_hello: float, only: str | None = None) -> list[tuple[str, str, list[Any]]]:
        """Barriers released now (all of them, or `only`): (name, why, the connections that wait at it)."""
        out = []
        for name, b in ([(only, self.all[only])] if only is not None else list(self.all.items())):
            if b.released is None and (why := self._why(b, started, last_hello)):
                b.released = why
                out.append((name, why, list(b.waiting.values())))
                b.waiting.clear()
        return out

    def _why(self, b: Barrier, started: int, last_hello: float) -> str | None:
        # Counts, not sets: at 8,000 ranks a look costs the same as at 8. Every entered rank said hello first.
        alive, alive_in = started - len(self.ended), len(b.entered) - b.ended_in
        if len(b.entered) + len(self.ended) - b.ended_in >= b.count:
            return "all in"
        if not (b.per_rank and b.entered and alive_in == alive):
            return None
        if self.settled_at == started:
            return f"every rank that started is in ({started} of {b.count}); the launch settled before"
        if time.monotonic() - last_hello > talk.QUIET_S:
            self.settled_at = started
            return (f"{len(b.entered)} of {b.count} ranks in, every one that started; none started for "
                    f"{talk.QUIET_S:.0f} s: starting without the rest")
        return None
