"""Which node a short look belongs to: each node judged by the share of its looks that fell short, blamed only
where the looks make a test with a stated error rate, the node the looks weigh most against first.

    looks = [Look(("n1", "n2"), "FAIL"), Look(("n1", "n3"), "WARN"), ...]   # the nodes each look crossed
    shares = peel(looks, order=["n1", "n2", "n3"])
    shares["n1"].status(), shares["n1"].blamed       # "FAIL", 1

A look is one measurement of one pair of nodes (one all-reduce round's
median), judged PASS, WARN or FAIL against its line. The looks given are
those that say something of the nodes' own links: pairs inside one leaf
switch (no uplink crossed), against known-good partners, or every pair where
no topology says the leaves (bench.validate.looks chooses); looks across
leaves are the fabric's first (bench.validate.above). A part's share is its
short looks (WARN or FAIL) over its looks: Imbue's rule for 4,092 H100s (a
host judged by its share of good rounds). Which node is blamed, and in which
order, is a likelihood-ratio test, not the share alone:

  evidence = short x ln(P_BAD / P_HEALTHY) + passed x ln((1 - P_BAD) / (1 - P_HEALTHY))

the log of how much likelier its looks are if the node is bad (short in
P_BAD of them: half, an intermittent fault) than healthy (short in
P_HEALTHY: 1%, where the lines sit at 3 standard deviations of a look's noise,
0.13%). A node is blamed only where evidence >= EVIDENCE (ln 1,000): a
healthy node reaches it with odds under 1 in 1,000 (a likelihood ratio's
tail bound), so a 1,000-node run expects at most one false suspect, and
more looks weigh more (8 short looks of 8 outweigh 40 of 200). The one with
the most evidence is blamed first ("peeling"), and its looks are taken off
every other part's count: a bad node's partners are not blamed for it.
A blamed node's status is its shares':

  FAIL   at least FAIL_SHARE of its looks FAILed (two thirds: slow in most
         looks, and by more than the FAIL line);
  WARN   at least WARN_SHARE of its looks were short (a third): slow now and
         then ("intermittent" while under two thirds), or slow in most looks
         but only past the WARN line (a suspect whose pairs only WARN is WARN);
  PASS   otherwise, with at least one look left;
  SKIP   no look left: every look it had crossed a blamed part (untold()
         where some of those were short: it may be slow too).

Pure: parts are names, looks are statuses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

WARN_SHARE = 1 / 3
FAIL_SHARE = 2 / 3
DOUBT_EVIDENCE = 2.0  # looks this much likelier (ln) from a bad node: not yet blamed, but worth looking at again
SHORT = ("WARN", "FAIL")
P_HEALTHY = 0.01   # the most often a healthy part's look falls short (its lines: 3 sigma, 0.13%)
P_BAD = 0.5        # a bad node's looks fall short at least this often (intermittent: half)
EVIDENCE = math.log(1000)  # blamed past a likelihood ratio of 1,000: a healthy part there 1 time in 1,000 at most


def evidence(short: int, looks: int, p_bad: float = P_BAD) -> float:
    """ln of how much likelier `short` short looks of `looks` are from a bad part (p_bad) than a healthy one."""
    if looks <= 0:
        return 0.0
    return short * math.log(p_bad / P_HEALTHY) + (looks - short) * math.log((1 - p_bad) / (1 - P_HEALTHY))


@dataclass(frozen=True, slots=True)
class Look:
    parts: tuple[str, ...]   # every part the look crossed: its two nodes, and across leaves their leaves
    status: str              # PASS, WARN or FAIL against its line


@dataclass(slots=True)
class Share:
    looks: int = 0
    short: int = 0
    failed: int = 0
    blamed: int | None = None          # 1, 2, ...: the order parts were blamed in; None: not blamed
    explained_by: dict[str, int] = field(default_factory=dict)  # blamed part -> its looks taken off this count
    explained_short: int = 0           # of those, the short ones
    across_looks: int = 0              # its looks across leaves (the fabric's first: bench.validate.above)
    across_short: int = 0
    own_across: int = 0                # of its looks, those across leaves counted as its own (short inside too)

    def add(self, status: str, sign: int = 1) -> None:
        self.looks += sign
        self.short += sign * (status in SHORT)
        self.failed += sign * (status == "FAIL")

    def status(self) -> str:
        if self.looks <= 0:
            return "SKIP"
        if self.failed >= FAIL_SHARE * self.looks:
            return "FAIL"
        if self.short >= WARN_SHARE * self.looks:
            return "WARN"
        return "PASS"

    def evidence(self) -> float:
        return evidence(self.short, self.looks)

    def doubtful(self, more_looks: int = 0, more_short: int = 0) -> bool:
        """Not blamed, but its looks (and `more_looks`: its looks across leaves no other part explains) at least
        e^DOUBT_EVIDENCE (7) times likelier from a bad node than a healthy one: one short of 2, two of 10, three of
        16; a node slow in half its looks is that in 99% of 10 looks. Too few looks to blame may be either side of
        the line, so its pairs are looked at again."""
        looks, short = self.looks + more_looks, self.short + more_short
        return self.blamed is None and looks > 0 and evidence(short, looks) >= DOUBT_EVIDENCE

    def untold(self) -> bool:
        """Not blamed, no look left, and short looks taken off: every partner it was short with is blamed, so
        whether it is slow too cannot be told from these looks."""
        return self.blamed is None and self.looks <= 0 and self.explained_short > 0

    def intermittent(self) -> bool:
        """Short in some of its looks but fewer than two thirds: slow now and then, not always."""
        return 0 < self.short < FAIL_SHARE * self.looks

    def describe(self) -> str:
        text = f"{self.short} of {self.looks} look(s) short ({self.failed} FAIL)"
        if self.own_across:
            text += (f", {self.own_across} of them across leaves that no other part explains (counted as its own: "
                     "short inside its leaf too)")
        if self.explained_by:
            gone = ", ".join(f"{n} with {p}" for p, n in self.explained_by.items())
            text += f"; not counted: {gone} (that part is blamed for them)"
        return text


def peel(looks: Iterable[Look], order: list[str]) -> dict[str, Share]:
    """Every part's share (order: every part, in the order ties are broken: the first of equals is blamed first)."""
    shares = {p: Share() for p in order}
    looks = list(looks)
    by_part: dict[str, list[int]] = {p: [] for p in order}
    for i, look in enumerate(looks):
        for p in look.parts:
            shares[p].add(look.status)
            by_part[p].append(i)
    gone = [False] * len(looks)
    rank = {p: i for i, p in enumerate(order)}
    blamed = 0
    while True:
        suspects = [p for p, s in shares.items() if s.blamed is None and s.status() in SHORT
                    and s.evidence() >= EVIDENCE]
        if not suspects:
            return shares
        worst = max(suspects, key=lambda p: (shares[p].evidence(), shares[p].failed, -rank[p]))
        blamed += 1
        shares[worst].blamed = blamed
        for i in by_part[worst]:
            if gone[i]:
                continue
            gone[i] = True
            for other in looks[i].parts:
                s = shares[other]
                if other != worst and s.blamed is None:
                    s.add(looks[i].status, -1)
                    s.explained_by[worst] = s.explained_by.get(worst, 0) + 1
                    s.explained_short += looks[i].status in SHORT
