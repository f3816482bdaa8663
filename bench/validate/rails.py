"""validate's rails check: each NIC on its own, so that one bad HCA, port or cable among a node's several is named.

    bench validate --rails mlx5_0,mlx5_1,...     # or, on CPU nodes, the interfaces: --rails eth0,eth1

The inter-node check measures what NCCL (or gloo) makes of all of a node's
NICs together: on a node with one HCA per GPU a rail at a quarter of its
rate is averaged away. Here the level's first pair rounds run once per rail,
every rank of both nodes told to use that one device (NCCL_IB_HCA=<hca> on
GPUs, or NCCL_SOCKET_IFNAME where it names an interface; GLOO_SOCKET_IFNAME
on CPU), the same name on every node (as rails are cabled). Each node's best
pair on a rail is judged against the other nodes' on the same rail (its
peers) and the floor (bench.validate.links.judge_link); a row per node and
rail, and per rail and pair in the figures. Rails come from --rails, else
the inventory: the InfiniBand/RoCE HCAs with an Active port, where every
node has the same two or more. With fewer than two, SKIP: the inter-node
check measured the node's one way out. What it cannot see: a rail's
switch-side fault that only shows under all rails at once (the inter-node
check's), and NCCL's own choice of rail inside one run.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.analysis import metrics
from bench.validate import pairing, runs
from bench.validate.links import judge_link, message_size, rate
from bench.validate.state import CLUSTER, Validation

ACTION = "drain: one of the node's NICs (this rail) is slower than the same rail of its peers; check that HCA, its " \
         "port, cable and switch port"


def _ports(v: Validation, host: str) -> list[dict]:
    """The node's InfiniBand/RoCE ports from its inventory (sysfs, else ibstat)."""
    raw = ((v.inventory.get(host) or {}).get("interconnect") or {}).get("raw") or {}
    return [p for p in (raw.get("sysfs_ib") or raw.get("ibstat") or []) if isinstance(p, dict) and p.get("ca")]


def _auto(v: Validation, hosts: list[str]) -> list[str]:
    """The HCAs with an Active port that every node has (two or more), from the inventory; else none."""
    per = [{p["ca"] for p in _ports(v, h) if p.get("state") == "Active"} for h in hosts]
    common = set.intersection(*per) if per else set()
    return sorted(common) if len(common) >= 2 else []


def _environ(v: Validation, rail: str, hcas: bool) -> dict[str, str]:
    # "=mlx5_0": NCCL_IB_HCA's exact match (mlx5_1 would also match mlx5_10 without it).
    return dict(os.environ, **{_variable(v, hcas): f"={rail}" if hcas else rail})


def _variable(v: Validation, hcas: bool) -> str:
    return "GLOO_SOCKET_IFNAME" if v.device != "cuda" else "NCCL_IB_HCA" if hcas else "NCCL_SOCKET_IFNAME"


def _measure(v: Validation, hosts: list[str], rail: str, hcas: bool) -> tuple[dict[str, float], dict[str, int], dict]:
    res = {h: v.good_slots(h) for h in hosts}
    groups, names, round_groups = pairing.pair_groups(hosts, v.pair_rounds(hosts) * v.cfg.repeats, False,
                                                      runs.ranks_of(res))
    rec = runs.comm(v, res, groups, names, round_groups, [message_size(v)], f"rails-{rail}",
                    environ=_environ(v, rail, hcas))
    bw, wrong = pairing.pair_figures(rec.get("rows") or [])
    return {p: max(xs) for p, xs in bw.items() if xs}, wrong, rec


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
    known = {p["ca"] for h in hosts for p in _ports(v, h)}
    figures: dict[str, Any] = {}
    for rail in chosen:
        hcas = v.device == "cuda" and rail in known  # an HCA: NCCL's IB transport; else an interface
        bw, wrong, rec = _measure(v, hosts, rail, hcas)
        if "rows" not in rec:
            err = rec.get("error") or {}
            for h in hosts:
                v.add("rails", f"{h} {rail}", "ERROR", reason=f"rail {rail} could not be measured: the all-reduce "
                      f"run failed at {err.get('where')}: {err.get('reason')}", host=h, t0=t0)
            continue
        best = _node_best(hosts, bw)
        figures[rail] = {"pairs": bw, "nodes": best}
        median = metrics.percentile(list(best.values()), 50) if best else None
        for h in hosts:
            if h not in best:
                v.add("rails", f"{h} {rail}", "ERROR", reason=f"no pair of {h} measured on rail {rail}", host=h,
                      t0=t0)
                continue
            mine = [n for n in bw if h in n.split("+")]
            bad = sum(wrong.get(n, 0) for n in mine)
            peers = [x for k, x in best.items() if k != h]
            status, ref, why = judge_link(v, best[h], bad, 2 * len(v.good_slots(h)), None, peers,
                                          metrics.percentile(peers, 50) if len(peers) >= 2 else median)
            shown = ", ".join(f"{n} {rate(bw[n])}" for n in sorted(mine))
            v.add("rails", f"{h} {rail}", status, f"{rate(best[h])} busbw (best pair on {rail})", ref,
                  f"rail {rail} alone ({_variable(v, hcas)}={rail} on both nodes); its pairs: {shown}; {why}", host=h, figure=best[h],
                  action=ACTION if status == "FAIL" else "", t0=t0)
    v.figures["rails"] = figures
