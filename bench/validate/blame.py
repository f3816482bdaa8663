"""Which part a short look belongs to: each node and each leaf switch judged by the share of its looks that fell
short, the part that explains the most first.

    looks = [Look(("n1", "n2"), "FAIL"), Look(("n1", "n3", "leaf:a"), "WARN"), ...]   # the parts each look crossed
    shares = peel(looks, order=["leaf:a", "n1", "n2", "n3"])
    shares["n1"].status(), shares["n1"].blamed       # "FAIL", 1

A look is one measurement of one pair of nodes (one all-reduce round's
median), judged PASS, WARN or FAIL against its line; it crossed both nodes'
links and, between leaf switches, both leaves' uplinks. A part's share is
its short looks (WARN or FAIL) over its looks: Imbue's rule for 4,092 H100s
(a host judged by its share of good rounds), so a link that is slow now
and then is seen in its share, where keeping the better of two looks hid
it. A look with a part that is already blamed says nothing more about the
others it crossed: a bad node's partners, a slow uplink's nodes. So parts
are blamed one at a time, the one with the largest share of failed, then
short, looks first ("peeling"), and their looks are taken off every other
part's count. What is left is judged by the same shares:

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

from collections.abc import Iterable
from dataclasses import dataclass, field

WARN_SHARE = 1 / 3
FAIL_SHARE = 2 / 3
DOUBT_SHARE = 1 / 6  # short in this share of its looks: not yet a WARN, but worth every pair of it looked at again
SHORT = ("WARN", "FAIL")


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

    def doubtful(self) -> bool:
        """Not blamed, but short in at least DOUBT_SHARE of its looks: a share near the WARN line from few looks
        may be either side of it (a node slow in half its looks shows in under a third of 40 about 2% of the
        time), so its pairs are looked at again."""
        return self.blamed is None and self.looks > 0 and self.short >= DOUBT_SHARE * self.looks

    def untold(self) -> bool:
        """Not blamed, no look left, and short looks taken off: every partner it was short with is blamed, so
        whether it is slow too cannot be told from these looks."""
        return self.blamed is None and self.looks <= 0 and self.explained_short > 0

    def intermittent(self) -> bool:
        """Short in some of its looks but fewer than two thirds: slow now and then, not always."""
        return 0 < self.short < FAIL_SHARE * self.looks

    def describe(self) -> str:
        text = f"{self.short} of {self.looks} look(s) short ({self.failed} FAIL)"
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
        suspects = [p for p, s in shares.items() if s.blamed is None and s.status() in SHORT]
        if not suspects:
            return shares
        worst = max(suspects, key=lambda p: (shares[p].failed / shares[p].looks, shares[p].short / shares[p].looks,
                                             shares[p].short, -rank[p]))
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
