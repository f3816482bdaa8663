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


def inter_node(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("inter-node")
    hosts = v.good
    if len(hosts) < 2:
        for h in hosts:
            v.add("inter-node", h, "SKIP", reason="fewer than two good nodes: no link between nodes", host=h)
        v.add("inter-node", CLUSTER, "SKIP", reason="fewer than two good nodes")
        return
    ahead = v.links_ahead
    if ahead is not None and ahead["hosts"] == hosts:
        # Measured in the intra-node check's launch, over the same nodes (bench.validate.links): no second start.
        bw, wrong, rec = ahead["bw"], ahead["wrong"], ahead["rec"]
    else:
        bw, wrong, rec = _launch(v, hosts, pairing.first_rounds(v.level.pairs, len(hosts)), len(hosts) > 2,
                                 "inter-node")
    if "rows" not in rec:
        err = rec.get("error") or {}
        why = f"could not be measured: the all-reduce run failed at {err.get('where')}: {err.get('reason')}"
        for h in hosts:
            v.add("inter-node", h, "ERROR", reason=why, host=h)
        v.add("inter-node", CLUSTER, "ERROR", reason=why, t0=t0)
        return
    v.figures["busbw_rows"] = rec["rows"]
    pair = {name: metrics.percentile(xs, 50) for name, xs in bw.items() if name != "all"}
    first = dict(pair)
    ranks_of_pair = {f"{a}+{b}": len(v.good_slots(a)) + len(v.good_slots(b)) for a in hosts for b in hosts}
    idx = {h: i for i, h in enumerate(hosts)}

    def judge_all() -> tuple[dict[str, float], dict[str, tuple]]:
        best = {h: max(x for p, x in pair.items() if h in p.split("+")) for h in hosts}
        peers = list(best.values()) if len(hosts) > 2 else []   # two nodes: the one pair is its own median
        return best, {name: judge_link(v, x, wrong.get(name, 0), ranks_of_pair[name],
                                       _pair_ref(v, *name.split("+")), peers) for name, x in pair.items()}

    best, judged = judge_all()
    passed = {h for name, j in judged.items() if j[0] == "PASS" for h in name.split("+")}
    suspects = [h for h in hosts if h not in passed]
    again = [tuple(idx[h] for h in name.split("+")) for name, j in judged.items() if j[0] != "PASS"]
    known = {frozenset(p) for p in again}
    again += [p for p in pairing.retest_pairs([idx[h] for h in suspects], [idx[h] for h in hosts if h in passed])
              if frozenset(p) not in known]
    second: dict[str, float] = {}
    if again:
        bw2, wrong2, _ = _launch(v, hosts, pairing.schedule(again), False, "inter-node-again")
        for name, xs in bw2.items():
            a, b = name.split("+")
            key = name if name in pair or f"{b}+{a}" not in pair else f"{b}+{a}"
            second[key] = metrics.percentile(xs, 50)
            pair[key] = max(pair.get(key, 0.0), second[key])
            wrong[key] = wrong.get(key, 0) + wrong2.get(name, 0)
        best, judged = judge_all()
    for name, busbw in pair.items():
        looks = f" (better of {rate(first[name])}, {rate(second[name])})" if name in first and name in second else ""
        v.add("inter-node", name, judged[name][0], f"{rate(busbw)} busbw{looks}", judged[name][1],
              f"all-reduce of {message_size(v)} B over both nodes' GPUs; {judged[name][2]}", t0=t0, figure=busbw)
    v.figures["pair_busbw"] = pair
    v.figures["pair_busbw_looks"] = {k: [first.get(k), second.get(k)] for k in pair}
    passed = {h for name, j in judged.items() if j[0] == "PASS" for h in name.split("+")}
    retest = {s: [(o, x, judged[n][0]) for n, x in pair.items() for o in n.split("+")
                  if s in n.split("+") and o != s and o in passed] for s in hosts if s not in passed}
    retest = {s: xs for s, xs in retest.items() if xs}
    if retest:
        v.figures["bisection"] = {s: [{"against": o, "busbw": x, "status": st} for o, x, st in xs]
                                  for s, xs in retest.items()}
    v.figures["node_busbw"] = {h: best[h] for h in hosts}
    for h in hosts:
        mine = {p: j for p, j in judged.items() if h in p.split("+")}
        if h in passed:
            v.add_node("inter-node", h, "PASS", f"{rate(best[h])} busbw (best pair)", "its pairs",
                       f"PASS in {sum(j[0] == 'PASS' for j in mine.values())} of {len(mine)} pair(s)", t0=t0,
                       figure=best[h])
        elif h in retest:
            tries = retest[h]
            shown = ", ".join(f"{o} {rate(x)} {st}" for o, x, st in tries)
            v.figures["node_busbw"][h] = max(x for _, x, _ in tries)
            v.add_node("inter-node", h, "FAIL", f"{rate(max(x for _, x, _ in tries))} busbw (best against good "
                       "nodes)", "nodes found good", f"no PASS in its {len(mine)} pair(s), each looked at twice; "
                       f"measured again against {len(tries)} node(s) found good: {shown}; this node, not its "
                       "neighbours", t0=t0, figure=max(x for _, x, _ in tries))
        else:
            worst = min(mine.values(), key=lambda j: {"FAIL": 0, "WARN": 1}.get(j[0], 2))
            why = ("two nodes: one link, and which end is at fault cannot be told (a third good node would say)"
                   if len(hosts) == 2 else "no pair of any node PASSed: the network, or every node")
            v.add_node("inter-node", h, worst[0], f"{rate(best[h])} busbw (best pair)", worst[1],
                       f"{why}; {worst[2]}", t0=t0, figure=best[h])
    if "all" in bw:
        whole, median = metrics.percentile(bw["all"], 50), metrics.percentile(list(best.values()), 50)
        dev = whole / median - 1
        v.figures["inter_all"] = {"busbw": whole, "ranks": sum(len(v.good_slots(h)) for h in hosts)}
        v.add("inter-node", CLUSTER, "FAIL" if wrong.get("all") else "WARN" if dev < v.table.busbw.fail_lower
              else "PASS", f"{rate(whole)} busbw, {len(hosts)} nodes", f"node median {rate(median)}",
              f"whole-set all-reduce, {pct(dev)} from the nodes' median best pair (its ring runs at its slowest "
              f"link: a slow node shows here too, and its own row names it); #wrong {wrong.get('all', 0)}", t0=t0)
    else:
        only = next(iter(pair))
        v.add("inter-node", CLUSTER, judged[only][0], f"{rate(pair[only])} busbw, 2 nodes", judged[only][1],
              "two nodes: the whole set is the one pair", t0=t0)
