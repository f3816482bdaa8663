"""validate's inter-node check: node pairs in rounds of disjoint pairs, every look counted, the short ones blamed.

One all-reduce launch over every good node: each pair (all selected GPUs
of both nodes) in a group, the pairs of a round (a matching,
bench.validate.pairing) at the same time, rounds one after another, the
level's passes over them (Level.pair_looks x --repeats), then the whole set
once (the ring the training uses: the cluster row and the scaling
prediction). `quick` measures ring pairs, `full` every pair (past 16 nodes
the ring and random matchings); with a topology each leaf switch's own ring
too (pairs that cross no uplink).

Every look is judged on its own (bench.validate.looks: the published figure
for the nodes' NICs where the pair crosses no leaf switch's uplink, else
lines derived from the nodes' best pairs), and a node or a leaf switch is
judged by the share of its looks that fell short (bench.validate.blame:
Imbue's rule; the part that explains the most short looks first, so a bad
node's partners and a slow uplink's nodes are not blamed for it). Before
anything is called slow a second launch looks again (Level.again_looks
times, else as many as the first): at every pair with a short look, at every
pair of a node in doubt (blame.Share.doubtful), and at each node blamed or
in doubt against two nodes that were neither (bisection). A leaf whose looks
across leaves fall short while its nodes' own do not gets a `fabric` row (bench.validate.fabric): its nodes
are held, not drained. Two nodes have one link: which end is at fault
cannot be told, so both carry the verdict.
"""

from __future__ import annotations

import time

from bench.analysis import metrics
from bench.validate import blame, fabric, pairing, runs
from bench.validate.gpus import pct
from bench.validate.links import message_size, rate
from bench.validate.looks import Links, judge_all
from bench.validate.state import CLUSTER, Validation


def _launch(v: Validation, hosts: list[str], rounds: list[list[tuple[int, int]]], with_all: bool, tag: str):
    """Measure these rounds of pairs (indices into hosts); {pair name: [busbw...]}, {pair: wrong}, the record."""
    res = {h: v.good_slots(h) for h in hosts}
    groups, names, round_groups = pairing.pair_groups(hosts, rounds, with_all, runs.ranks_of(res))
    rec = runs.comm(v, res, groups, names, round_groups, [message_size(v)], tag)
    bw, wrong = pairing.pair_figures(rec.get("rows") or [])
    return bw, wrong, rec


def _first_look(v: Validation, hosts: list[str]) -> tuple[dict[str, list[float]], dict[str, int], dict]:
    """The level's pairs and the whole set: measured in the intra-node check's launch over the same nodes
    (bench.validate.links: no second start), else now."""
    ahead = v.links_ahead
    if ahead is not None and ahead["hosts"] == hosts:
        return ahead["bw"], ahead["wrong"], ahead["rec"]
    return _launch(v, hosts, v.pair_schedule(hosts), len(hosts) > 2, "inter-node")


def _unexplained(links: Links, shares: dict[str, blame.Share]) -> dict[str, list[int]]:
    """{node: [looks, short, failed]} of its judged looks across leaves that neither a blamed node nor a part above
    the leaves explains."""
    more: dict[str, list[int]] = {}
    for x in links.pairs.values():
        if links.inside(x) or x.pair.key in links.covered or any(shares[h].blamed is not None for h in x.pair.key):
            continue
        n = sum(s != "SKIP" for s in x.statuses)
        for h in x.pair.key:
            m = more.setdefault(h, [0, 0, 0])
            m[0], m[1], m[2] = m[0] + n, m[1] + x.short(), m[2] + x.statuses.count("FAIL")
    return more


def _in_doubt(hosts: list[str], links: Links, shares: dict[str, blame.Share]) -> set[str]:
    """The nodes in doubt (blame.Share.doubtful): by their looks inside their leaf and those across leaves no other
    part explains (a node slow now and then is slow across leaves too: with one look across and two inside at each
    pair, `full`'s 10 looks tell it where its 4 inside would not)."""
    more = _unexplained(links, shares)
    return {h for h in hosts if shares[h].doubtful(*more.get(h, (0, 0))[:2])}


def _own_across(hosts: list[str], links: Links, shares: dict[str, blame.Share]) -> None:
    """A node whose looks inside its leaf pass the likelihood test (blame.EVIDENCE: short there too) but whose share
    there stays under the WARN line: its looks across leaves that no other part explains are its own as well, and
    it is judged by all of them (a node is blamed for looks across leaves only where its looks inside are short)."""
    more = _unexplained(links, shares)
    order = max((s.blamed for s in shares.values() if s.blamed is not None), default=0)
    for h in hosts:
        s = shares[h]
        if s.blamed is not None or s.evidence() < blame.EVIDENCE or h not in more:
            continue
        n, short, failed = more[h]
        both = blame.Share(looks=s.looks + n, short=s.short + short, failed=s.failed + failed)
        if both.status() in blame.SHORT:
            order += 1
            s.looks, s.short, s.failed, s.own_across, s.blamed = both.looks, both.short, both.failed, n, order


def _second_look(v: Validation, hosts: list[str], links: Links, shares: dict[str, blame.Share]) -> bool:
    """Again, in one launch (the level's again_looks at each): every pair with a short look; every pair of a node in
    doubt (blame.Share.doubtful); each node blamed or in doubt against two nodes that were neither (bisection; nodes
    of its own leaf first, whose pairs cross no uplink); the pairs inside its leaf of every node held for a part of
    the fabric (it may be in doubt too: its own link is told by them); without a topology, the suspects (blamed, or
    with a short pair) in a ring of their own (a group fast together and slow with the rest shares a path, not a bad
    NIC each). A pair measured again is judged by the second look alone (Link.judged). False when nothing needed
    it."""
    idx = {h: i for i, h in enumerate(hosts)}
    # The blamed, those left with no look that were short with blamed partners only (untold), and those in doubt
    # (judged by their second looks alone, which carry what the first launch's few could not: Level.again_looks):
    # each against two nodes none of these, its own leaf's first (their pairs cross no uplink).
    doubt = _in_doubt(hosts, links, shares)
    blamed = [h for h in hosts if shares[h].blamed is not None or shares[h].untold() or h in doubt]
    held = {h for p in links.above if p.kind in ("up", "leaf") for h in hosts
            if h == p.key or links.leaf.get(h) == p.key}
    again = [(idx[x.pair.a], idx[x.pair.b]) for x in links.pairs.values()
             if x.short() or x.pair.a in doubt or x.pair.b in doubt
             or (links.inside(x) and (x.pair.a in held or x.pair.b in held))]
    known = {frozenset(p) for p in again}
    good = [h for h in hosts if shares[h].blamed is None and shares[h].looks and h not in held and h not in doubt]
    leaf = links.leaf
    extra = []
    own: dict[str | None, list[str]] = {}
    for g in good:
        own.setdefault(leaf.get(g), []).append(g)
    for i, h in enumerate(blamed):  # spread over the good: the same two for every suspect would make them look bad
        near = (own.get(leaf.get(h)) if leaf.get(h) is not None else None) or good
        if near:
            extra += [(idx[h], idx[near[(2 * i + j) % len(near)]]) for j in range(min(2, len(near)))]
    if not links.topology:  # the suspects in a ring of their own: every node blamed or with a short pair
        shorts = {h for x in links.pairs.values() if x.short() for h in (x.pair.a, x.pair.b)}
        suspects = [h for h in hosts if h in shorts or h in set(blamed)]
        if len(suspects) >= 3:
            extra += [(idx[a], idx[b]) for a, b in zip(suspects, suspects[1:] + suspects[:1])]
    for p in extra:
        if frozenset(p) not in known:
            known.add(frozenset(p))
            again.append(p)
    if again:
        # As many looks at each as the first launch took: a share of looks needs them, and only the pairs in
        # doubt pay for it (a node slow in half its looks is caught in 19 of 20 seeds only so: docs/validate.md).
        bw, wrong, _ = _launch(v, hosts, pairing.schedule(again) * v.again_passes, False, "inter-node-again")
        links.add(bw, wrong, first=False)
    return bool(again)


def _together(h: str, links: Links, shares: dict[str, blame.Share]) -> list[str]:
    """Without a topology: the nodes this blamed node's pair with PASSes that are short with others too, and short
    with the nodes h is short with where they met them (neither has a bad link, then: they share a path the others do
    not, a leaf whose uplinks are slow; a bad NIC is slow with every partner, and has none). A partner fast with most
    of those h is short with shares no path that explains h: on the unhealthy H100 logs node003's fast partners 002
    and 006 are short with others but fine with 013 and 014, short with node003 alone."""
    if links.topology or shares[h].blamed is None:
        return []
    mine = links.of(h)
    slow = {x.other(h) for x in mine if x.short()}
    out = []
    for x in mine:
        o = x.other(h)
        if x.status() != "PASS" or not any(y.short() and h not in y.pair.key for y in links.of(o)):
            continue
        met = [y for y in links.of(o) if y.other(o) in slow]
        if not met or 2 * sum(bool(y.short()) for y in met) > len(met):
            out.append(o)
    return out


def _pair_rows(v: Validation, links: Links, shares: dict[str, blame.Share], t0: float) -> None:
    for x in links.pairs.values():
        n = len(x.statuses)
        looks = f" (median of {n} looks, {x.short()} short)" if n > 1 else ""
        blamed = [p for p in (x.pair.a, x.pair.b) if shares[p].blamed is not None]
        if links.explained(x):
            blamed.append("the fabric above the leaves")
        why = f"; blamed on {' and '.join(blamed)} (its own row)" if blamed and x.status() != "PASS" else ""
        v.add("inter-node", x.pair.name, x.status(), f"{rate(x.busbw)} busbw{looks}", x.reference,
              f"all-reduce of {message_size(v)} B over both nodes' GPUs{x.where()}; {x.note}{why}", t0=t0,
              figure=x.busbw)
    v.figures["pair_busbw"] = {x.pair.name: x.busbw for x in links.pairs.values()}
    v.figures["pair_busbw_looks"] = {x.pair.name: list(x.looks) for x in links.pairs.values()}


def _node_rows(v: Validation, hosts: list[str], links: Links, shares: dict[str, blame.Share], t0: float) -> None:
    """Each node by the share of its looks that fell short, after what blamed parts explain (bench.validate.blame);
    a blamed node's value is its best pair against nodes not blamed, where it has one."""
    best = links.best()
    v.figures["node_busbw"] = dict(best)
    bisection = {}
    for h in hosts:
        s = shares[h]
        status = s.status() if s.blamed is not None else "PASS" if s.looks else "WARN" if s.untold() else "SKIP"
        mine = links.of(h)
        against = [x for x in mine if shares[x.other(h)].blamed is None and not links.explained(x)]
        figure = max((x.busbw for x in against), default=best[h]) if s.blamed is not None else best[h]
        if s.blamed is not None and against:
            bisection[h] = [{"against": x.other(h), "busbw": x.busbw, "status": x.status()} for x in against]
            v.figures["node_busbw"][h] = figure
        why = f"{s.describe()} over its {len(mine)} pair(s)"
        if links.topology:
            why = f"inside its leaf: {why}" + (f"; across leaves {s.across_short} of {s.across_looks} look(s) short "
                                               "(the fabric's first: its fabric row)" if s.across_looks else "")
        together = _together(h, links, shares)
        unplaced = links.topology and links.leaf.get(h) is None
        if s.looks == 0 and not s.untold() and s.across_looks:
            status = "PASS"
            why = f"across leaves only: {s.across_short} of {s.across_looks} look(s) short (its fabric row judges them)"
        if len(hosts) == 2:  # one link: no third node to tell the ends apart, so both carry its verdict
            status = mine[0].status()
        if s.blamed is not None and against and len(hosts) > 2:
            why += "; measured again against {} node(s) found good: ".format(len(against)) + ", ".join(
                f"{x.other(h)} {rate(x.busbw)} {x.status()}" for x in against)
        if status == "FAIL" and together:
            status = "WARN"
            why += (f"; but fast with {_some(together)}, short with others as it is: a path they share (a leaf's "
                    "uplinks), not its link; held, not drained (no topology: uplinks not covered)")
        elif status == "FAIL" and unplaced:
            status = "WARN"
            why += "; the topology does not place it: its link cannot be told from the path above it; not drained"
        elif status == "FAIL" and len(hosts) > 2:
            why += "; failed in most of its looks against parts not blamed: this node, not its neighbours"
        elif status == "WARN" and s.untold():
            why = (f"short with every partner, and each of those is blamed ({s.describe()}): it may be slow too, and "
                   "could not be told apart (no good node was left to measure it against)")
        elif status == "WARN" and not together and not unplaced:
            why += ("; intermittent: short in some looks, not in most" if s.intermittent() else
                    "; short in most looks, but only past the WARN line")
        elif status == "SKIP":
            why = (f"every look it had crossed a part blamed before it ({s.describe()}): its own link could not "
                   "be told apart")
        if len(hosts) == 2 and status != "PASS":
            why += "; two nodes: one link, and which end is at fault cannot be told (a third good node would say)"
        value = f"{rate(figure)} busbw ({'best against parts not blamed' if s.blamed is not None else 'best pair'})"
        v.add_node("inter-node", h, status, value, links.reference_of(h), why, t0=t0, figure=figure)
    if bisection:
        v.figures["bisection"] = bisection


def _some(xs: list[str], most: int = 4) -> str:
    return ", ".join(xs[:most]) + (f" and {len(xs) - most} more" if len(xs) > most else "")


def _cluster_row(v: Validation, hosts: list[str], links: Links, t0: float) -> None:
    """The whole set's all-reduce against the nodes' median best pair (with a topology: their best pair across
    leaf switches, since the whole set's ring crosses them); two nodes: their one pair."""
    if links.whole:
        whole = metrics.percentile(links.whole, 50)
        best = links.best(across=True) or links.best()
        median = metrics.percentile(list(best.values()), 50)
        dev = whole / median - 1
        v.figures["inter_all"] = {"busbw": whole, "ranks": sum(len(v.good_slots(h)) for h in hosts)}
        what = "best pair across leaf switches" if links.best(across=True) else "best pair"
        v.add("inter-node", CLUSTER, "FAIL" if links.whole_wrong else "WARN" if dev < v.table.busbw.fail_lower
              else "PASS", f"{rate(whole)} busbw, {len(hosts)} nodes", f"node median {rate(median)}",
              f"whole-set all-reduce, {pct(dev)} from the nodes' median {what} (its ring runs at its slowest link: a "
              f"slow node or uplink shows here too, and its own row names it); #wrong {links.whole_wrong}", t0=t0)
    else:
        only = next(iter(links.pairs.values()))
        v.add("inter-node", CLUSTER, only.status(), f"{rate(only.busbw)} busbw, 2 nodes", only.reference,
              "two nodes: the whole set is the one pair", t0=t0)


def inter_node(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("inter-node")
    hosts = v.good
    if len(hosts) < 2:
        for h in hosts:
            v.add("inter-node", h, "SKIP", reason="fewer than two good nodes: no link between nodes", host=h)
        v.add("inter-node", CLUSTER, "SKIP", reason="fewer than two good nodes")
        return
    bw, wrong, rec = _first_look(v, hosts)
    if "rows" not in rec:
        err = rec.get("error") or {}
        why = f"could not be measured: the all-reduce run failed at {err.get('where')}: {err.get('reason')}"
        for h in hosts:
            v.add("inter-node", h, "ERROR", reason=why, host=h)
        v.add("inter-node", CLUSTER, "ERROR", reason=why, t0=t0)
        return
    v.figures["busbw_rows"] = rec["rows"]
    links = Links(leaf=dict(zip(hosts, v.leaves(hosts) or [None] * len(hosts))))
    links.add(bw, wrong, first=True)
    shares = judge_all(v, hosts, links)
    if _second_look(v, hosts, links, shares):
        shares = judge_all(v, hosts, links)
    _own_across(hosts, links, shares)
    _pair_rows(v, links, shares, t0)
    _node_rows(v, hosts, links, shares, t0)
    _cluster_row(v, hosts, links, t0)
    fabric.rows(v, hosts, links, shares, t0)
