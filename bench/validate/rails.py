"""validate's rails check: each NIC on its own, so that one bad HCA, port or cable among a node's several is named.

    bench validate --rails mlx5_0,mlx5_1,...     # HCAs; or interfaces: --rails eth0,eth1

The inter-node check measures what NCCL (or gloo) makes of all of a node's
NICs together: on a node with one HCA per GPU a rail at a quarter of its
rate is averaged away. Here the level's first pair rounds run once per rail
(one launch each), every rank of the nodes told to use that one device
alone (bench.validate.rail_env: NCCL's IB transport on that HCA, or its
socket transport on that interface; on CPU the HCA's interface for gloo),
the same name on every node (as rails are cabled). On GPUs bench then
reads NCCL's INFO log (bench.launch.nccl_net): a node whose traffic went by
another transport or device than the one asked is an ERROR, never a PASS.
Each node's best pair on a rail is judged against the other nodes' on the
same rail (its peers) and the floor (bench.validate.links.judge_link); a
row per node and rail, and per rail and pair in the figures. Rails come
from --rails, else the inventory: the InfiniBand/RoCE HCAs with an Active
port, where every node has the same two or more. With fewer than two,
SKIP: the inter-node check measured the node's one way out. A rail that
cannot be measured (an HCA without an interface, on CPU) is a SKIP row
saying why; a node that lacks a rail the others have is an ERROR. What it
cannot see: a rail's switch-side fault that only shows under all rails at
once (the inter-node check's), and NCCL's own choice of rail inside one run.
"""

from __future__ import annotations

import time
from typing import Any

from bench.analysis import metrics
from bench.launch import nccl_net
from bench.validate import pairing, runs
from bench.validate.links import judge_link, message_size, rate
from bench.validate.rail_env import RailPlan, rail_plan
from bench.validate.state import CLUSTER, Validation

ACTION = "drain: one of the node's NICs (this rail) is slower than the same rail of its peers; check that HCA, its " \
         "port, cable and switch port"


def _ports(v: Validation, host: str) -> list[dict]:
    """The node's InfiniBand/RoCE ports from its inventory (sysfs, else ibstat)."""
    raw = (v.interconnect(host) or {}).get("raw") or {}
    return [p for p in (raw.get("sysfs_ib") or raw.get("ibstat") or []) if isinstance(p, dict) and p.get("ca")]


def _auto(v: Validation, hosts: list[str]) -> list[str]:
    """The HCAs with an Active port that every node has (two or more), from the inventory; else none."""
    per = [{p["ca"] for p in _ports(v, h) if p.get("state") == "Active"} for h in hosts]
    common = set.intersection(*per) if per else set()
    return sorted(common) if len(common) >= 2 else []


def _measure(v: Validation, plan: RailPlan) -> tuple[dict[str, float], dict[str, int], dict]:
    res = {h: v.good_slots(h) for h in plan.hosts}
    groups, names, round_groups = pairing.pair_groups(plan.hosts, v.pair_rounds(plan.hosts) * v.cfg.repeats, False,
                                                      runs.ranks_of(res))
    rec = runs.comm(v, res, groups, names, round_groups, [message_size(v)], f"rails-{plan.rail}",
                    environ=plan.environ)
    bw, wrong = pairing.pair_figures(rec.get("rows") or [])
    return {p: max(xs) for p, xs in bw.items() if xs}, wrong, rec


def _strays(v: Validation, plan: RailPlan, rec: dict) -> dict[str, str]:
    """{host: what NCCL's log says it used instead} for each node whose traffic did not go where the rail asked."""
    if plan.expect is None:
        return {}
    ranks = runs.ranks_of({h: v.good_slots(h) for h in plan.hosts})
    out = {}
    for h in plan.hosts:
        ok, said = nccl_net.carried(nccl_net.read(rec.get("run_dir") or "", ranks[h]), *plan.expect)
        if not ok:
            out[h] = said
    return out


def _node_best(hosts: list[str], bw: dict[str, float]) -> dict[str, float]:
    best: dict[str, float] = {}
    for name, x in bw.items():
        for h in name.split("+"):
            best[h] = max(best.get(h, 0.0), x)
    return {h: best[h] for h in hosts if h in best}


def rails(v: Validation) -> None:
    t0 = time.time()
    hosts = v.good
    given = list(v.cfg.rails or ())
    chosen = given or _auto(v, hosts)
    if len(hosts) < 2 or len(chosen) < 2:
        why = ("fewer than two good nodes" if len(hosts) < 2 else
               f"one rail given ({chosen[0]}): the inter-node check measured it" if chosen else
               "no rails given (--rails) and no two Active InfiniBand/RoCE HCAs common to every node: the "
               "inter-node check measured each node's one way out")
        v.add("rails", CLUSTER, "SKIP", reason=why, t0=t0)
        return
    figures: dict[str, Any] = {}
    for rail in chosen:
        plan = rail_plan(v, rail, hosts)
        for h, why in plan.missing.items():
            v.add("rails", f"{h} {rail}", "ERROR", reason=f"rail {rail} not measured on {h}: {why}", host=h, t0=t0)
        if plan.skip or len(plan.hosts) < 2:
            why = plan.skip or f"fewer than two nodes have {rail}"
            for h in plan.hosts:
                v.add("rails", f"{h} {rail}", "SKIP", reason=f"rail {rail} not measured: {why}", host=h, t0=t0)
            continue
        bw, wrong, rec = _measure(v, plan)
        if "rows" not in rec:
            err = rec.get("error") or {}
            for h in plan.hosts:
                v.add("rails", f"{h} {rail}", "ERROR", reason=f"rail {rail} could not be measured ({plan.how}): the "
                      f"all-reduce run failed at {err.get('where')}: {err.get('reason')}", host=h, t0=t0)
            continue
        best = _node_best(plan.hosts, bw)
        strays = _strays(v, plan, rec)
        figures[rail] = {"pairs": bw, "nodes": best, "how": plan.how, **({"strays": strays} if strays else {})}
        _judge(v, plan, bw, wrong, best, strays, t0)
    v.figures["rails"] = figures


def _judge(v: Validation, plan: RailPlan, bw: dict[str, float], wrong: dict[str, int], best: dict[str, float],
           strays: dict[str, str], t0: float) -> None:
    rail = plan.rail
    median = metrics.percentile(list(best.values()), 50) if best else None
    for h in plan.hosts:
        if h in strays:
            v.add("rails", f"{h} {rail}", "ERROR", f"{rate(best[h])} busbw" if h in best else "",
                  f"rail {rail} alone ({plan.how})", f"not rail {rail}'s figure: {strays[h]}", host=h, t0=t0)
            continue
        if h not in best:
            v.add("rails", f"{h} {rail}", "ERROR", reason=f"no pair of {h} measured on rail {rail}", host=h, t0=t0)
            continue
        mine = [n for n in bw if h in n.split("+")]
        bad = sum(wrong.get(n, 0) for n in mine)
        peers = [x for k, x in best.items() if k != h]
        status, ref, why = judge_link(v, best[h], bad, 2 * len(v.good_slots(h)), None, peers,
                                      metrics.percentile(peers, 50) if len(peers) >= 2 else median)
        shown = ", ".join(f"{n} {rate(bw[n])}" for n in sorted(mine))
        v.add("rails", f"{h} {rail}", status, f"{rate(best[h])} busbw (best pair on {rail})", ref,
              f"rail {rail} alone ({plan.how} on every node); its pairs: {shown}; {why}", host=h, figure=best[h],
              action=ACTION if status == "FAIL" else "", t0=t0)
