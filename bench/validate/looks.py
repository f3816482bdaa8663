"""The inter-node check's looks: every measurement of every pair kept, each judged against its line.

    links = Links(leaf={"n1": "leafA", ...})      # each node's leaf switch, None without a topology
    links.add({"n1+n2": [9.1e9, 4.2e9]}, {}, first=True)
    shares = judge_all(v, hosts, links)           # statuses of every look, then bench.validate.blame.peel

A pair's looks are judged against one line, by where the pair runs:
  inside one leaf switch (or with no topology): the published figure for the
      slower end's NICs where there is one, else lines from the nodes' best
      such pairs (bench.analysis.peer_lines: the spread of those, the spread
      over the level's passes, and a floor for how much one look moves);
  across two leaf switches: lines from the nodes' best pairs across leaves,
      never the published NIC figure: an oversubscribed fabric runs every
      such pair slower by the same share and is healthy; a pair slower than
      its peers there is its nodes' or its uplinks', and bench.validate.blame
      says which;
and always against the floor (bench.validate.links.floor); #wrong FAILs
every look of its pair. LINK_FAIL is the line past the noise: a link a
quarter slower than its peers FAILs, as below a published NIC figure
(bench/data/reference_throughput.json's lower: -25%).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.analysis import metrics, peer_lines
from bench.validate import above, blame, norm
from bench.validate.links import floor, judge_link, link_ref, rate
from bench.validate.state import Validation

LINK_FAIL = norm.LINK_FAIL
# How far one look of a healthy pair moves, where nothing measured says more. NCCL's busbw between two nodes
# repeats within a few percent: 10%. gloo's between CPU ranks sharing the suite's two cores moves by far more,
# measured here (2026-12-06): on one bridge (4 hosts, 8 looks at each of 4 pairs, load 10) a look's log sd around
# its pair's 0.30, the worst -52%; across the leaf bridges of tests/multihost/leaves.py (13 healthy runs of 6
# hosts, load 7-20) 0.68, 20 of 102 looks past -35%, 11 past -50%, one past -75%, the worst -87%. A floor of 80%
# passes all but that one; a 200 Mbit/s uplink's looks are 97% short, a 100 Mbit/s host's 98%.
LOOK_FLOOR = {"cuda": (0.10, "one look of a pair over NCCL"),
              "cpu": (0.80, "one look of a pair over gloo on CPU ranks that share cores, as measured here")}


def switch(leaf: str) -> str:
    """A leaf switch as a part of the looks that cross its uplinks (bench.validate.blame), beside the nodes."""
    return f"switch {leaf}"


@dataclass(frozen=True, slots=True)
class Pair:
    """Two nodes measured together, in the order the pair was first named ("a+b" in the rows)."""

    a: str
    b: str

    @classmethod
    def of(cls, name: str) -> "Pair":
        a, b = name.split("+")  # host names never hold "+" (bench.cluster.hostnames)
        return cls(a, b)

    @property
    def name(self) -> str:
        return f"{self.a}+{self.b}"

    @property
    def key(self) -> frozenset[str]:
        """The pair whatever the order it is named in (a second look may name it b+a)."""
        return frozenset((self.a, self.b))


@dataclass(slots=True)
class Link:
    """A pair's looks (busbw each, first launch's first), its wrong values, and each look's status."""

    pair: Pair
    across: tuple[str, str] | None = None  # its two leaf switches where they differ
    looks: list[float] = field(default_factory=list)
    firsts: int = 0
    wrong: int = 0
    statuses: list[str] = field(default_factory=list)   # of the judged looks (judged())
    every: list[str] = field(default_factory=list)      # of every look, first and second launch's
    reference: str = "none"
    note: str = ""
    busbw: float = 0.0       # the median look (Links.add keeps it)

    def other(self, host: str) -> str:
        return self.pair.b if self.pair.a == host else self.pair.a

    def judged(self) -> list[float]:
        """The looks it is judged by: the second launch's where it was measured again (its first looks chose it
        for that, so counting them again would weigh a pair short once as short twice), else the first's."""
        return self.looks[self.firsts:] if len(self.looks) > self.firsts else self.looks

    def parts(self) -> tuple[str, ...]:
        return (self.pair.a, self.pair.b) + (tuple(switch(x) for x in self.across) if self.across else ())

    def short(self) -> int:
        return sum(s in blame.SHORT for s in self.statuses)

    def status(self) -> str:
        """The pair's own row: the share rule over its looks."""
        share = blame.Share()
        for s in self.statuses:
            if s != "SKIP":
                share.add(s)
        return share.status()

    def where(self) -> str:
        return f", across leaf switches {self.across[0]} and {self.across[1]}" if self.across else ""


@dataclass(slots=True)
class Links:
    """What the inter-node check measured: the pairs, and the whole set's all-reduce where it ran."""

    leaf: dict[str, str | None] = field(default_factory=dict)
    pairs: dict[frozenset[str], Link] = field(default_factory=dict)
    whole: list[float] = field(default_factory=list)
    whole_wrong: int = 0
    by_host: dict[str, list[Link]] = field(default_factory=dict)
    lines_of: dict[str, str] = field(default_factory=dict)  # host -> the line its inside pairs were judged by
    above: list = field(default_factory=list)    # bench.validate.above.Part: the fabric's parts found slow
    covered: set = field(default_factory=set)    # keys of the pairs across leaves those parts explain
    placed: bool | None = None                   # whether any node's leaf is known (topology)

    @property
    def topology(self) -> bool:
        if self.placed is None:
            self.placed = any(x is not None for x in self.leaf.values())
        return self.placed

    def inside(self, link: Link) -> bool:
        """The pair crosses no uplink (both ends on one leaf), or no topology says the leaves (every pair is)."""
        la, lb = self.leaf.get(link.pair.a), self.leaf.get(link.pair.b)
        return not self.topology or (la is not None and la == lb)

    def add(self, bw: dict[str, list[float]], wrong: dict[str, int], first: bool) -> None:
        """One launch's rows (bench.validate.pairing.pair_figures): every row is a look."""
        for name, xs in bw.items():
            if name == "all":
                self.whole, self.whole_wrong = xs, wrong.get("all", 0)
                continue
            p = Pair.of(name)
            link = self.pairs.get(p.key)
            if link is None:
                la, lb = self.leaf.get(p.a), self.leaf.get(p.b)
                link = self.pairs[p.key] = Link(p, (la, lb) if la and lb and la != lb else None)
                for h in (p.a, p.b):
                    self.by_host.setdefault(h, []).append(link)
            link.looks += xs
            link.firsts += len(xs) if first else 0
            link.wrong += wrong.get(name, 0)
            link.busbw = metrics.percentile(link.judged(), 50)

    def of(self, host: str) -> list[Link]:
        return list(self.by_host.get(host, ()))

    def best(self, across: bool | None = None) -> dict[str, float]:
        """Each node's best pair (its median look); across=True/False: of its pairs across / inside leaves only."""
        out = {}
        for h, xs in self.by_host.items():
            mine = [x.busbw for x in xs if across is None or (x.across is not None) == across]
            if mine:
                out[h] = max(mine)
        return out

    def explained(self, link: Link, shares: dict[str, blame.Share] | None = None) -> bool:
        """The pair crossed a part of the fabric found slow (bench.validate.above): its looks say nothing of its
        nodes."""
        return link.pair.key in self.covered

    def reference_of(self, host: str) -> str:
        return self.lines_of.get(host, "its pairs")


def _lines(v: Validation, links: Links, inside: bool, within=None) -> peer_lines.Lines | None:
    """Lines from the median looks of every pair of this kind (inside a leaf, or across: where an end's leaf is not
    known too), the spread over the level's passes, and the look floor. Across leaves (within: the lines inside),
    the fabric's norm is its design where --oversubscription gives it, else its fastest mode (bench.validate.norm):
    with half the leaves behind slow uplinks, the slow half is not the norm."""
    chosen = [x for x in links.pairs.values() if links.inside(x) == inside]
    # Each pair's first looks, the level's passes over it (pairs first met in the second launch have none): a look's
    # spread about its pair's, where there are passes.
    passes = max((x.firsts for x in chosen), default=0)
    rounds = [x.looks[:x.firsts] for x in chosen if x.firsts == passes] if passes >= 2 else []

    def derive(values: list[float]) -> peer_lines.Lines | None:
        return peer_lines.derive(values, rounds=rounds, straggler=LINK_FAIL,
                                 floor=LOOK_FLOOR["cuda" if v.device == "cuda" else "cpu"])
    values = [x.busbw for x in chosen]
    if inside:
        return derive(values)
    design = v.tree.design if v.tree is not None else None  # a topology's own (ibnetdiscover's ports)
    return norm.across(values, derive, within, v.cfg.oversubscription or (design[0] if design else None))


def _cut(v: Validation, link: Link, ranks: int, ref, lines) -> tuple[float, float] | None:
    """(WARN below, FAIL below) in bytes/s for one look of this link; None: nothing to judge it against. A published
    figure's line gets the noise its kind of link shows here: a look FAILs below it only where it is below the
    pairs' own noise line too (lines: 3 sigma of a look), so a healthy cluster's noisy looks raise nothing."""
    line, _ = floor(v, ranks)
    warn = fail = None
    if ref is not None:
        fail = ref.busbw * (1 + ref.lower) if ref.lower is not None else 0.0
        if lines is not None:
            fail = min(fail, lines.median * (1 - lines.noise))
        warn = fail
    elif lines is not None:
        warn, fail = lines.median * (1 - lines.noise), lines.median * (1 - lines.fail)
    if line is not None:
        fail = max(fail or 0.0, line)
        warn = max(warn or 0.0, fail)
    return None if fail is None else (warn, fail)


def judge_all(v: Validation, hosts: list[str], links: Links) -> dict[str, blame.Share]:
    """Every look's status, each pair's reference and note (from its median look); then the nodes, by the looks
    that say something of their own links (bench.validate.blame.peel: pairs inside a leaf, every pair without a
    topology); then the fabric above the leaves, by the looks across leaves no blamed node explains
    (bench.validate.above.explain: links.above, links.covered)."""
    topology = links.topology
    lines = {True: _lines(v, links, True)}
    if topology:
        lines[False] = _lines(v, links, False, lines[True])
    known = v.derived.setdefault("inter_refs", {})  # a node's published figure, once per run and GPU count
    refs = {}
    for h in hosts:  # by inventory (one object per node's answer; the same object answers the same)
        key = (id(v.inventory.get(h)), len(v.good_slots(h)))
        if key not in known:
            known[key] = link_ref(v, "inter", h)
        refs[h] = known[key]
    for x in links.pairs.values():
        inside = links.inside(x)
        ref = _slower(refs[x.pair.a], refs[x.pair.b]) if inside else None
        ranks = len(v.good_slots(x.pair.a)) + len(v.good_slots(x.pair.b))
        cut = _cut(v, x, ranks, ref, lines[inside])
        if cut is None or x.wrong:
            x.every = ["FAIL" if x.wrong else "SKIP"] * len(x.looks)
        else:
            x.every = ["FAIL" if bw < cut[1] else "WARN" if bw < cut[0] else "PASS" for bw in x.looks]
        x.statuses = x.every[x.firsts:] if len(x.looks) > x.firsts else x.every
        _, x.reference, x.note = judge_link(v, x.busbw, x.wrong, ranks, ref, [], lines=lines[inside])
        if cut is None and not x.wrong:
            x.note = "no published figure, no peers and no floor: nothing to judge it against"
    for h in hosts:
        ln = lines[True]
        links.lines_of[h] = refs[h].label if refs[h] is not None else \
            (f"median {rate(ln.median)} of {ln.n} ({ln.describe()})" if ln else "its pairs")
    mine = [blame.Look((x.pair.a, x.pair.b), s) for x in links.pairs.values() if links.inside(x)
            for s in x.statuses if s != "SKIP"]
    shares = blame.peel(mine, order=list(hosts))
    for x in links.pairs.values():  # every look counted on the node, the fabric's too: the record shows them all
        if not links.inside(x):
            for h in (x.pair.a, x.pair.b):
                shares[h].across_looks += sum(s != "SKIP" for s in x.statuses)
                shares[h].across_short += x.short()
    cross = [(x, above.Cross(x.pair.a, x.pair.b, links.leaf.get(x.pair.a), links.leaf.get(x.pair.b),
                             sum(s != "SKIP" for s in x.every), sum(s in blame.SHORT for s in x.every),
                             x.every.count("FAIL")))
             for x in links.pairs.values() if not links.inside(x)
             and shares[x.pair.a].blamed is None and shares[x.pair.b].blamed is None]
    # a fault of the fabric is steady: both launches' looks count
    links.above = above.explain([c for _, c in cross])
    index = above.index(links.above)
    links.covered = {x.pair.key for x, c in cross if above.covers(index, c)}
    return shares


def _slower(a, b):
    """The published figure for the slower end's NICs, when both ends have one."""
    return None if a is None or b is None else min((a, b), key=lambda r: r.busbw)

