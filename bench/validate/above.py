"""Which part of the fabric above the leaves a short look across leaves belongs to: a leaf's uplinks, the uplink a
group of a leaf's nodes routes through, a leaf pair's path, or the fabric above the leaves (a spine).

    looks = [Cross("n1", "n40", "leaf00", "leaf01", 4, 4, 4), ...]   # pairs across leaves: looks, short, FAIL
    parts = explain(looks)        # [Part(kind="group", leaf="leaf07", nodes=(...)), ...], the best first

A look across leaves crossed both nodes' uplinks, both leaves' and the path
between the leaves (with static routing each node reaches the spines through
one of its leaf's uplinks; each leaf pair's traffic through one spine, as ECMP
hashes it). Which of those is slow is told by the pattern of the short looks:
  a leaf's uplinks       every look of the leaf short, whatever the partner;
  one uplink of a leaf   the looks of some of its nodes short, whatever the
                         partner, and the others' not (the nodes behind it);
  a leaf pair's path     the looks between two leaves short, theirs with
                         others not; many such pairs over many leaves: the
                         fabric above the leaves (a spine, its links).
Each is a family of parts (leaves; nodes' ways up; leaf pairs), and each
family is fitted to the looks on its own: a part of it is taken as bad where
the likelihood ratio of its looks (short in P_FABRIC of them if bad, in
blame.P_HEALTHY if not) beats blame.EVIDENCE, the part that gains most
first, its looks then explained. The family that explains the looks best
(the most log-likelihood, less EVIDENCE per part it names: the fewest parts
for the same looks) is taken; what it leaves unexplained is fitted again,
to NAMES_MOST rounds. So half the leaves slow is those leaves named (16
parts), not 376 leaf pairs nor 512 nodes; a spine is leaf pairs, since no
leaf nor node has its looks short whatever the partner; one uplink is its 8
nodes, since the leaf's other 24 nodes' looks pass. A node of a leaf bench
does not know (not placed by the topology) can only be a "node way up".

Pure: names and statuses in, parts out.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from bench.validate.blame import EVIDENCE, P_HEALTHY

P_FABRIC = 0.99    # a slow fabric part's looks fall short nearly always (a cable, a port: not now and then)
ROUNDS_MOST = 3    # families fitted one after another over what is left


@dataclass(frozen=True, slots=True)
class Cross:
    """The looks at one pair across leaves: how many, how many short, how many FAILed."""

    a: str
    b: str
    la: str | None   # None: a leaf the topology does not say
    lb: str | None
    looks: int
    short: int
    failed: int = 0


@dataclass(slots=True)
class Part:
    kind: str                # "leaf", "up" (a node's way up: its uplink), "pair" (two leaves' path)
    key: object              # the leaf, the node, or frozenset of two leaves
    looks: int = 0
    short: int = 0
    failed: int = 0
    gain: float = 0.0
    members: list[int] = field(default_factory=list)   # indices of its looks

    def share(self) -> float:
        return self.short / self.looks if self.looks else 0.0


def _keys(kind: str, x: Cross) -> tuple:
    if kind == "leaf":
        return tuple(k for k in {x.la, x.lb} if k is not None)
    if kind == "up":
        return (x.a, x.b)
    return (frozenset((x.la, x.lb)),) if x.la is not None and x.lb is not None else ()


def _fit(kind: str, looks: list[Cross], open_: list[int]) -> tuple[float, list[Part]]:
    """Greedy fit of one family to the looks `open_` (indices): (its total gain, its bad parts, in order)."""
    up, down = math.log(P_FABRIC / P_HEALTHY), math.log((1 - P_FABRIC) / (1 - P_HEALTHY))
    worth = [looks[i].short * up + (looks[i].looks - looks[i].short) * down for i in range(len(looks))]
    parts: dict[object, Part] = {}
    for i in open_:
        for k in _keys(kind, looks[i]):
            p = parts.setdefault(k, Part(kind, k))
            p.members.append(i)
            p.gain += worth[i]
    heap = [(-p.gain, n, k) for n, (k, p) in enumerate(parts.items())]
    order = {k: n for _, n, k in heap}
    heapq.heapify(heap)
    covered: set[int] = set()
    chosen: list[Part] = []
    while heap:
        gain, _, k = heapq.heappop(heap)
        p = parts.get(k)
        if p is None or -gain != p.gain:
            continue  # taken, or its gain changed since (a fresher entry is in the heap)
        if p.gain < EVIDENCE:
            break
        del parts[k]
        p.gain -= EVIDENCE
        fresh = [i for i in p.members if i not in covered]
        p.looks = sum(looks[i].looks for i in fresh)
        p.short = sum(looks[i].short for i in fresh)
        p.failed = sum(looks[i].failed for i in fresh)
        chosen.append(p)
        touched = set()
        for i in fresh:
            covered.add(i)
            for other in _keys(kind, looks[i]):
                if other in parts:
                    parts[other].gain -= worth[i]
                    touched.add(other)
        for other in touched:
            heapq.heappush(heap, (-parts[other].gain, order[other], other))
    return sum(p.gain for p in chosen), chosen


def explain(looks: list[Cross]) -> list[Part]:
    """The fabric parts that explain the short looks across leaves, by family (module doc), the best first."""
    open_ = list(range(len(looks)))
    out: list[Part] = []
    for _ in range(ROUNDS_MOST):
        if not any(looks[i].short for i in open_):
            break  # nothing short left to explain (a healthy fabric: no fit at all)
        fits = [_fit(kind, looks, open_) for kind in ("leaf", "up", "pair")]
        gain, parts = max(fits, key=lambda f: f[0])
        if not parts:
            break
        out += parts
        gone = {i for p in parts for i in p.members}
        open_ = [i for i in open_ if i not in gone]
    return out


def index(parts: list[Part]) -> dict[str, set]:
    """{kind: its parts' keys}, for covers()."""
    by: dict[str, set] = {}
    for p in parts:
        by.setdefault(p.kind, set()).add(p.key)
    return by


def covers(by: dict[str, set], x: Cross) -> bool:
    """Whether one of the parts (index()) explains a look across these nodes and leaves."""
    return any(k in keys for kind, keys in by.items() for k in _keys(kind, x))
