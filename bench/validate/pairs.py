"""validate's inter-node check: node pairs in rounds of disjoint pairs, then bisection to name the node.

One all-reduce launch over every good node: each pair (all selected GPUs
of both nodes) in a group, the pairs of a round (a matching,
bench.validate.pairing) at the same time, rounds one after another, then
the whole set once (the ring the training uses: the cluster row and the
scaling prediction). `quick` measures ring pairs (2 or 3 rounds), `full`
every pair (N-1 rounds). A pair is judged like any link (bench.validate.links:
the published figure for the nodes' NICs, else the median over nodes of
each node's best pair, and the floor). Before anything is called slow, a
second launch looks again: at every pair that did not PASS (a pair keeps
the better of its two looks), and at every node none of whose pairs
PASSed (a suspect) against two nodes that did (bisection); a suspect still
without a PASS against good nodes FAILs, so the row names the node, not
the pair. Two nodes have one link: judged
against the reference or the floor, never an unconditional PASS; which end
is at fault cannot be told, so both nodes carry the verdict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.analysis import metrics
from bench.validate import pairing, runs
from bench.validate.gpus import pct
from bench.validate.links import judge_link, link_ref, message_size, rate
from bench.validate.state import CLUSTER, Validation


def _launch(v: Validation, hosts: list[str], rounds: list[list[tuple[int, int]]], with_all: bool, tag: str):
    """Measure these rounds of pairs (indices into hosts); {pair name: [busbw...]}, {pair: wrong}, the record."""
    res = {h: v.good_slots(h) for h in hosts}
    groups, names, round_groups = pairing.pair_groups(hosts, rounds * v.cfg.repeats, with_all, runs.ranks_of(res))
    rec = runs.comm(v, res, groups, names, round_groups, [message_size(v)], tag)
    bw, wrong = pairing.pair_figures(rec.get("rows") or [])
    return bw, wrong, rec


def _pair_ref(v: Validation, a: str, b: str):
    """The published figure for the slower end's NICs, when both ends have one."""
    refs = [link_ref(v, "inter", h) for h in (a, b)]
    return None if None in refs else min(refs, key=lambda r: r.busbw)


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
    """A pair's busbw in each look (None: not measured in it), its wrong values, and its verdict."""

    pair: Pair
    first: float | None = None
    second: float | None = None
    wrong: int = 0
    verdict: tuple[str, str, str] = ("SKIP", "none", "")

    @property
    def busbw(self) -> float:
        """The better look: slow in one look only is not slow."""
        return max(x for x in (self.first, self.second) if x is not None)


@dataclass(slots=True)
class Links:
    """What the inter-node check measured: the pairs, and the whole set's all-reduce where it ran."""

    pairs: dict[frozenset[str], Link] = field(default_factory=dict)
    whole: list[float] = field(default_factory=list)
    whole_wrong: int = 0
    by_host: dict[str, list[Link]] = field(default_factory=dict)  # of(): a scan of every pair per host was N^2

    def add(self, bw: dict[str, list[float]], wrong: dict[str, int], look: str) -> None:
        """One launch's rows (bench.validate.pairing.pair_figures), as the first or second look."""
        for name, xs in bw.items():
            if name == "all":
                self.whole, self.whole_wrong = xs, wrong.get("all", 0)
                continue
            p = Pair.of(name)
            link = self.pairs.get(p.key)
            if link is None:
                link = self.pairs[p.key] = Link(p)
                for h in (p.a, p.b):
                    self.by_host.setdefault(h, []).append(link)
            setattr(link, look, metrics.percentile(xs, 50))
            link.wrong += wrong.get(name, 0)

    def of(self, host: str) -> list[Link]:
        """The host's pairs, in the order they were first measured."""
        return list(self.by_host.get(host, ()))

    def passed(self) -> set[str]:
        """The nodes found good: at least half their pairs PASS. A good node beside a bad one has one pair short
        of its k+2 (the ring's 2: one of two), a node with a bad NIC has most of them short: a suspect."""
        mine: dict[str, list[bool]] = {}
        for x in self.pairs.values():
            if x.first is None:
                continue  # a retest against good nodes: it clears or names a suspect (_node_rows), no more
            for h in (x.pair.a, x.pair.b):
                mine.setdefault(h, []).append(x.verdict[0] == "PASS")
        return {h for h, ok in mine.items() if 2 * sum(ok) >= len(ok)}


def _first_look(v: Validation, hosts: list[str]) -> tuple[dict[str, list[float]], dict[str, int], dict]:
    """The level's pairs and the whole set: measured in the intra-node check's launch over the same nodes
    (bench.validate.links: no second start), else now."""
    ahead = v.links_ahead
    if ahead is not None and ahead["hosts"] == hosts:
        return ahead["bw"], ahead["wrong"], ahead["rec"]
    return _launch(v, hosts, v.pair_rounds(hosts), len(hosts) > 2, "inter-node")


def _judge(v: Validation, hosts: list[str], links: Links) -> dict[str, float]:
    """Every pair's verdict (judge_link: the NICs' published figure, else the nodes' median best pair, and the
    floor); returns each node's best pair's busbw."""
    best = {h: max(x.busbw for x in links.of(h)) for h in hosts}
    peers = list(best.values()) if len(hosts) > 2 else []   # two nodes: the one pair is its own median
    median = metrics.percentile(peers, 50) if len(peers) >= 2 else None
    leaves = v.leaves(hosts)
    near = _LeafPeers(links, best, dict(zip(hosts, leaves))) if leaves else None
    for x in links.pairs.values():
        ranks = len(v.good_slots(x.pair.a)) + len(v.good_slots(x.pair.b))
        mine, mid = near.of(x.pair) if near else ([], None)
        x.verdict = judge_link(v, x.busbw, x.wrong, ranks, _pair_ref(v, x.pair.a, x.pair.b), mine or peers,
                               mid if mine else median)
    return best


class _LeafPeers:
    """--topology: what a pair is judged beside, nearest first: the pairs between the same two leaf switches (the
    same path through the fabric: an oversubscribed uplink slows them all, a bad node only its own; itself and
    at least three others), else the best pairs of the nodes on its leaves (at least three); else [] (the whole
    cluster's)."""

    def __init__(self, links: Links, best: dict[str, float], leaf: dict[str, str | None]):
        self.leaf = leaf
        self.by_path: dict[frozenset, list[float]] = {}
        for y in links.pairs.values():
            self.by_path.setdefault(self._path(y.pair), []).append(y.busbw)
        self.cache: dict[frozenset, tuple[list[float], float | None]] = {}
        self.by_leaf: dict[str | None, list[float]] = {}
        for h, bw in best.items():
            self.by_leaf.setdefault(leaf.get(h), []).append(bw)

    def _path(self, pair: Pair) -> frozenset:
        return frozenset((self.leaf.get(pair.a), self.leaf.get(pair.b)))

    def of(self, pair: Pair) -> tuple[list[float], float | None]:
        """(the peers, their median), each path's worked out once."""
        path = self._path(pair)
        if None in path:
            return [], None
        if path not in self.cache:
            near = self.by_path.get(path, [])
            if len(near) < 4:
                near = [bw for name in path for bw in self.by_leaf.get(name, [])]
            self.cache[path] = (near, metrics.percentile(near, 50)) if len(near) >= 3 else ([], None)
        return self.cache[path]


def _second_look(v: Validation, hosts: list[str], links: Links) -> bool:
    """Every pair that did not PASS once more, and each node with no PASS pair against two nodes that have one
    (bisection), in one launch; False when nothing needed it."""
    idx = {h: i for i, h in enumerate(hosts)}
    passed = links.passed()
    again = [(idx[x.pair.a], idx[x.pair.b]) for x in links.pairs.values() if x.verdict[0] != "PASS"]
    known = {frozenset(p) for p in again}
    again += [p for p in pairing.retest_pairs([idx[h] for h in hosts if h not in passed],
                                              [idx[h] for h in hosts if h in passed]) if frozenset(p) not in known]
    if again:
        bw, wrong, _ = _launch(v, hosts, pairing.schedule(again), False, "inter-node-again")
        links.add(bw, wrong, "second")
    return bool(again)


def _pair_rows(v: Validation, links: Links, t0: float) -> None:
    for x in links.pairs.values():
        looks = f" (better of {rate(x.first)}, {rate(x.second)})" if x.first is not None and x.second is not None \
            else ""
        v.add("inter-node", x.pair.name, x.verdict[0], f"{rate(x.busbw)} busbw{looks}", x.verdict[1],
              f"all-reduce of {message_size(v)} B over both nodes' GPUs; {x.verdict[2]}", t0=t0, figure=x.busbw)
    v.figures["pair_busbw"] = {x.pair.name: x.busbw for x in links.pairs.values()}
    v.figures["pair_busbw_looks"] = {x.pair.name: [x.first, x.second] for x in links.pairs.values()}


def _node_rows(v: Validation, hosts: list[str], links: Links, best: dict[str, float], t0: float) -> None:
    """Each node: PASS when at least half its pairs PASS; a suspect (most short) is judged by its pairs against
    nodes found good: PASS where most of those PASS (its other partners were the slow ones), else FAIL (this
    node, not its neighbours); with no good node to try it against, the worst of its pairs, and why which end
    is at fault cannot be told."""
    passed = links.passed()
    against_good = {h: [x for x in links.of(h) if (x.pair.b if x.pair.a == h else x.pair.a) in passed]
                    for h in hosts if h not in passed}
    against_good = {h: xs for h, xs in against_good.items() if xs}
    if against_good:
        v.figures["bisection"] = {h: [{"against": x.pair.b if x.pair.a == h else x.pair.a, "busbw": x.busbw,
                                       "status": x.verdict[0]} for x in xs] for h, xs in against_good.items()}
    v.figures["node_busbw"] = dict(best)
    for h in hosts:
        mine = links.of(h)
        n_pass = sum(x.verdict[0] == "PASS" for x in mine)
        tries = against_good.get(h, [])
        cleared = bool(tries) and 2 * sum(x.verdict[0] == "PASS" for x in tries) > len(tries)
        if h in passed or cleared:
            why = f"PASS in {n_pass} of {len(mine)} pair(s)" + (
                "; most of its pairs against nodes found good PASS: its other partners were the slow ends"
                if cleared else "")
            v.add_node("inter-node", h, "PASS", f"{rate(best[h])} busbw (best pair)", "its pairs", why, t0=t0,
                       figure=best[h])
        elif tries:
            top = max(x.busbw for x in tries)
            shown = ", ".join(f"{x.pair.b if x.pair.a == h else x.pair.a} {rate(x.busbw)} {x.verdict[0]}"
                              for x in tries)
            v.figures["node_busbw"][h] = top
            v.add_node("inter-node", h, "FAIL", f"{rate(top)} busbw (best against good nodes)", "nodes found good",
                       f"PASS in {n_pass} of its {len(mine)} pair(s), each looked at twice; measured again against "
                       f"{len(tries)} node(s) found good: {shown}; this node, not its neighbours", t0=t0, figure=top)
        else:
            worst = min((x.verdict for x in mine), key=lambda j: {"FAIL": 0, "WARN": 1}.get(j[0], 2))
            why = ("two nodes: one link, and which end is at fault cannot be told (a third good node would say)"
                   if len(hosts) == 2 else "no node has most of its pairs PASS: the network, or every node")
            v.add_node("inter-node", h, worst[0], f"{rate(best[h])} busbw (best pair)", worst[1],
                       f"{why}; {worst[2]}", t0=t0, figure=best[h])


def _cluster_row(v: Validation, hosts: list[str], links: Links, best: dict[str, float], t0: float) -> None:
    """The whole set's all-reduce against the nodes' median best pair; two nodes: their one pair."""
    if links.whole:
        whole, median = metrics.percentile(links.whole, 50), metrics.percentile(list(best.values()), 50)
        dev = whole / median - 1
        v.figures["inter_all"] = {"busbw": whole, "ranks": sum(len(v.good_slots(h)) for h in hosts)}
        v.add("inter-node", CLUSTER, "FAIL" if links.whole_wrong else "WARN" if dev < v.table.busbw.fail_lower
              else "PASS", f"{rate(whole)} busbw, {len(hosts)} nodes", f"node median {rate(median)}",
              f"whole-set all-reduce, {pct(dev)} from the nodes' median best pair (its ring runs at its slowest "
              f"link: a slow node shows here too, and its own row names it); #wrong {links.whole_wrong}", t0=t0)
    else:
        only = next(iter(links.pairs.values()))
        v.add("inter-node", CLUSTER, only.verdict[0], f"{rate(only.busbw)} busbw, 2 nodes", only.verdict[1],
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
    links = Links()
    links.add(bw, wrong, "first")
    best = _judge(v, hosts, links)
    if _second_look(v, hosts, links):
        best = _judge(v, hosts, links)
    _pair_rows(v, links, t0)
    _node_rows(v, hosts, links, best, t0)
    _cluster_row(v, hosts, links, best, t0)
