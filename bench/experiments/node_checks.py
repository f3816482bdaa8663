"""The per-node checks of `bench validate`, in the order they run: preflight, inventory, throughput, bandwidth.

Each takes the Validation, adds its Check rows (per node, and for the
"cluster" where it has one) and leaves the hosts that FAILed out of the
later checks. Every figure comes from bench.analysis.metrics; tolerances
from bench.analysis.references.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from bench.analysis import metrics
from bench.analysis.references import judge, judge_relative
from bench.cluster.hetero import verdict
from bench.cluster.inventory import probe_hosts, selected
from bench.cluster.preflight import preflight as check_hosts
from bench.core.errors import BadInput
from bench.core.precision import cpu_refusal
from bench.experiments.validation import CLUSTER, Validation, run_one
from bench.jobs.comm import measure

def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _rate(bps: float) -> str:
    return f"{bps / 1e6:.3g} MB/s"


def preflight(v: Validation) -> None:
    t0 = time.time()
    try:
        answers = check_hosts(list(v.resources), timeout=15.0)
    except ValueError as e:  # a host name that must not reach ssh; the hostfile parser should have said so
        raise BadInput(f"--hostfile: {e}") from None
    for c in answers:
        if c.ok:
            v.hostname_of[c.host] = c.hostname or c.host
            vers = c.versions
            v.add("preflight", c.host, "PASS", f"{c.hostname}: python {c.python}, deepspeed {vers.get('deepspeed')}, "
                  f"torch {vers.get('torch')}", "same as this machine", t0=t0)
        else:
            v.add("preflight", c.host, "FAIL", reason="; ".join(c.problems), reference="same as this machine", t0=t0)


def inventory(v: Validation) -> None:
    t0 = time.time()
    v.skip_excluded("inventory", {h: "excluded: FAIL in preflight" for h in v.resources})
    if not v.good:
        v.add("heterogeneity", CLUSTER, "SKIP", reason="no host passed preflight")
        return
    nodes, unreachable = probe_hosts({h: v.resources[h] for h in v.good}, 30.0, False)
    for host, why in unreachable.items():
        v.add("inventory", host, "FAIL", reason=f"not probed: {why}", t0=t0)
    verdict_ = verdict([selected(n) for n in nodes], v.cfg.precision, v.level.micro_batch)
    v.device = "cuda" if verdict_["gpus"] else "cpu"
    v.figures["verdict"] = verdict_
    failing = {h: f["message"] for f in verdict_["findings"] if f["level"] == "fail" for h in f["hosts"]}
    for n in nodes:
        host, inv = n["host"], selected(n)
        v.inventory[host] = inv
        gpus = inv.get("gpus") or []
        cpu = n.get("cpu") or {}
        value = (", ".join(sorted({g.get("name") or "?" for g in gpus})) + f" x{len(gpus)}" if gpus else
                 f"no GPU: {cpu.get('model') or 'CPU'}, {cpu.get('logical_cores') or '?'} cores")
        v.add("inventory", host, "FAIL" if host in failing else "PASS", value, reason=failing.get(host, ""), t0=t0)
    shown = [f"{f['level']} {f['code']}" for f in verdict_["findings"] if f["level"] in ("warn", "fail")]
    status = {"ok": "PASS", "warn": "WARN", "fail": "FAIL"}[verdict_["level"]]
    v.add("heterogeneity", CLUSTER, status, "uniform" if verdict_["uniform"] else "heterogeneous",
          reason="; ".join(shown) or "one kind of node", t0=t0)
    if v.device == "cpu" and cpu_refusal(v.cfg.precision):
        raise BadInput(f"--precision {v.cfg.precision}: the nodes have no GPU and {cpu_refusal(v.cfg.precision)}")


def _step_median(rec: dict) -> float:
    return rec["figures"]["step_s"]["median"]


def throughput(v: Validation) -> None:
    t0 = time.time()
    v.skip_excluded("throughput", {})
    hosts = list(v.good)
    if not hosts:
        return
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        recs = dict(zip(hosts, pool.map(lambda h: run_one(v, {h: v.resources[h][:1]}, v.level.steps), hosts)))
    ok = {}
    for h, rec in recs.items():
        v.runs[f"throughput:{h}"] = rec.get("run_dir", "")
        if rec.get("status") == "ok":
            step = _step_median(rec)
            ok[h] = v.level.micro_batch / step
            v.figures["node_step_s"][h] = step
            v.figures["node_images_per_s"][h] = ok[h]
            if "params" not in v.figures:
                v.figures["params"] = _summary(rec).get("model", {}).get("params")
    median = metrics.percentile(list(ok.values()), 50) if ok else 0.0
    for h, rec in recs.items():
        if h not in ok:
            err = rec.get("error") or {}
            v.add("throughput", h, "FAIL", reason=f"single-rank run failed at {err.get('where')}: {err.get('reason')}",
                  t0=t0)
            continue
        value = f"{ok[h]:.1f} img/s"
        gpus = v.inventory.get(h, {}).get("gpus") or []
        ref = v.table.throughput_for(gpus[0]["name"], v.cfg.precision, v.level.model, v.level.micro_batch) \
            if gpus and gpus[0].get("name") else None
        if ref is not None:
            status, dev = judge(ok[h], ref.value, ref.lower, ref.upper)
            v.add("throughput", h, status, value, f"{ref.value:g} img/s ({ref.gpu}, {ref.precision})",
                  f"{_pct(dev)} from the reference (tolerance {ref.lower}..{ref.upper}); {ref.source[:80]}", t0=t0)
        elif len(ok) < 2:
            v.add("throughput", h, "PASS", value, "none", "no reference for this node and no other node to compare "
                  "with", t0=t0)
        else:
            status, dev = judge_relative(ok[h], median, v.table.relative)
            v.add("throughput", h, status, value, f"cluster median {median:.1f} img/s",
                  f"{_pct(dev)} from the median (WARN below {_pct(v.table.relative.warn_lower)}, FAIL below "
                  f"{_pct(v.table.relative.fail_lower)}); no published reference for "
                  f"{gpus[0]['name'] if gpus else 'CPU'} / {v.level.model}", t0=t0)


def _summary(rec: dict) -> dict:
    try:
        with open(os.path.join(rec["run_dir"], "summary.json")) as f:
            return json.load(f)
    except (OSError, KeyError, ValueError):
        return {}


def _pairs(n: int) -> list[list[int]]:
    """Ring neighbours: with 3+ nodes each node is in two pairs, so a bad node shows twice, a good one once."""
    if n < 3:
        return []
    return [[i, (i + 1) % n] for i in range(n)]


def bandwidth(v: Validation) -> None:
    t0 = time.time()
    v.skip_excluded("bandwidth", {})
    hosts = list(v.good)
    if len(hosts) < 2:
        for h in hosts:
            v.add("bandwidth", h, "SKIP", reason="fewer than two good nodes: no link to measure")
        v.add("bandwidth", CLUSTER, "SKIP", reason="fewer than two good nodes")
        return
    pairs = _pairs(len(hosts))
    groups = pairs + [list(range(len(hosts)))]
    names = [f"{hosts[a]}+{hosts[b]}" for a, b in pairs] + ["all"]
    sizes = list(v.level.sizes_gpu if v.device == "cuda" else v.level.sizes_cpu)
    rec = measure({h: v.resources[h][:1] for h in hosts}, v.launcher_for(hosts), v.device, op="all_reduce", sizes=sizes,
                  iters=v.level.iters, warmup=v.level.comm_warmup, out_root=os.path.join(v.vdir, "runs"),
                  groups=groups, group_names=names, timeout=v.level.timeout)
    v.runs["bandwidth"] = rec.get("run_dir", "")
    if "rows" not in rec:
        err = rec.get("error") or {}
        for h in hosts:
            v.add("bandwidth", h, "SKIP", reason="the all-reduce run failed (see the cluster row)")
        v.add("bandwidth", CLUSTER, "FAIL", reason=f"all-reduce run failed at {err.get('where')}: {err.get('reason')}",
              t0=t0)
        return
    top = max(sizes)
    at_top = {r["group"]: r for r in rec["rows"] if r["size"] == top}
    v.figures["busbw_rows"] = rec["rows"]
    wrong = {r["group"] for r in rec["rows"] if r["wrong"]}
    best = {}
    for h in hosts:
        mine = [at_top[g] for g in at_top if h in g.split("+")] or [at_top["all"]]
        best[h] = max(r["busbw"] for r in mine)
    v.figures["node_busbw"] = best
    median = metrics.percentile(list(best.values()), 50)
    # The absolute floor holds for bandwidth-bound messages only; small ones measure latency.
    tol = v.table.busbw if top >= 1 << 20 else type(v.table.busbw)(v.table.busbw.warn_lower,
                                                                      v.table.busbw.fail_lower, None)
    for h in hosts:
        bad = sorted(g for g in wrong if h in g.split("+"))
        status, dev = judge_relative(best[h], median, tol) if len(hosts) > 2 else ("PASS", 0.0)
        reason = (f"best pair {_pct(dev)} from the nodes' median (WARN below {_pct(tol.warn_lower)}, "
                  f"FAIL below {_pct(tol.fail_lower)}) at {top} B" if len(hosts) > 2 else
                  f"two nodes: one link, nothing to compare with (at {top} B)")
        if tol.floor is not None and best[h] < tol.floor:
            reason = f"below the floor of {_rate(tol.floor)}; " + reason
        if bad:
            status, reason = "FAIL", f"wrong values after all-reduce in {', '.join(bad)}; " + reason
        v.add("bandwidth", h, status, f"{_rate(best[h])} busbw", f"median {_rate(median)}", reason, t0=t0)
    whole = at_top["all"]
    status, dev = judge_relative(whole["busbw"], median, tol)
    # The whole set takes more ring steps than a pair, so it reads lower at latency-bound sizes: only a
    # shortfall past the FAIL line (or the floor) is worth a WARN here; the nodes' rows name the culprit.
    v.add("bandwidth", CLUSTER, "FAIL" if "all" in wrong else ("WARN" if status == "FAIL" else "PASS"),
          f"{_rate(whole['busbw'])} busbw, {len(hosts)} nodes", f"node median {_rate(median)}",
          f"whole-set all-reduce at {top} B, {_pct(dev)} from the nodes' median; #wrong {whole['wrong']}", t0=t0)
