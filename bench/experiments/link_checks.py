"""validate's bandwidth check: every node's best link at the gradient's size, measured again before a node is
called slow (bench.jobs.comm.measure over ring-neighbour pairs and the whole set)."""

from __future__ import annotations

import os
import time

from bench.analysis import metrics
from bench.analysis.references import judge_relative
from bench.analysis.volume import comm_bytes_per_element
from bench.experiments.node_checks import _pct, _rate
from bench.experiments.validation import CLUSTER, Validation
from bench.jobs.comm import measure


def _pairs(n: int) -> list[list[int]]:
    """Ring neighbours: with 3+ nodes each node is in two pairs, so a bad node shows twice, a good one once."""
    if n < 3:
        return []
    return [[i, (i + 1) % n] for i in range(n)]


def message_sizes(params: int | None, precision: str, fallback: int) -> list[int]:
    """What the training run's all-reduce sends: the whole gradient (DeepSpeed ZeRO-0 reduces it in one bucket
    up to 5e8 elements) and a quarter of it (a smaller bucket), in bytes of the communication dtype."""
    if not params:
        return [fallback]
    grad = params * comm_bytes_per_element(precision)
    grad -= grad % 4
    return sorted({max(grad // 4 - grad // 4 % 4, 4096), grad})


def _measure_pairs(v: Validation, hosts: list[str], pairs: list[list[int]], sizes: list[int], tag: str) -> dict:
    names = [f"{hosts[a]}+{hosts[b]}" for a, b in pairs] + ["all"]
    rec = measure({h: v.resources[h][:1] for h in hosts}, v.launcher_for(hosts), v.device, op="all_reduce",
                  sizes=sizes, iters=v.level.iters, warmup=v.level.comm_warmup, out_root=os.path.join(v.vdir, "runs"),
                  groups=pairs + [list(range(len(hosts)))], group_names=names, timeout=v.level.timeout)
    v.runs[tag] = rec.get("run_dir", "")
    return rec


def _best(rows: list[dict], size: int, hosts: list[str]) -> dict[str, float]:
    """Each host's best pair busbw at `size` (a slow node is slow in both its pairs, a good one in at most one)."""
    at = {r["group"]: r for r in rows if r["size"] == size}
    return {h: max(at[g]["busbw"] for g in at if h in g.split("+")) for h in hosts if any(h in g.split("+") for g in at)}


def bandwidth(v: Validation) -> None:
    """Each node's best link at the gradient's size; a node that looks slow is measured again before it is called so."""
    t0 = time.time()
    v.skip_excluded("bandwidth", {})
    hosts = list(v.good)
    if len(hosts) < 2:
        for h in hosts:
            v.add("bandwidth", h, "SKIP", reason="fewer than two good nodes: no link to measure")
        v.add("bandwidth", CLUSTER, "SKIP", reason="fewer than two good nodes")
        return
    sizes = message_sizes(v.figures.get("params"), v.cfg.precision, v.level.fallback_size)
    top = max(sizes)
    pairs = _pairs(len(hosts))
    rec = _measure_pairs(v, hosts, pairs, sizes, "bandwidth")
    if "rows" not in rec:
        err = rec.get("error") or {}
        for h in hosts:
            v.add("bandwidth", h, "SKIP", reason="the all-reduce run failed (see the cluster row)")
        v.add("bandwidth", CLUSTER, "FAIL", reason=f"all-reduce run failed at {err.get('where')}: {err.get('reason')}",
              t0=t0)
        return
    v.figures["busbw_rows"] = rec["rows"]
    wrong = {r["group"] for r in rec["rows"] if r["wrong"]}
    if not pairs:  # two nodes: one link, the whole set
        only = next(r for r in rec["rows"] if r["size"] == top and r["group"] == "all")
        v.figures["node_busbw"] = {h: only["busbw"] for h in hosts}
        for h in hosts:
            v.add("bandwidth", h, "FAIL" if "all" in wrong else "PASS", f"{_rate(only['busbw'])} busbw",
                  "one link", f"two nodes: one link, nothing to compare with (at {top} B); #wrong {only['wrong']}", t0=t0)
        return
    tol = v.table.busbw
    seen = {h: [b] for h, b in _best(rec["rows"], top, hosts).items()}
    for k in range(1, v.cfg.repeats):  # --repeats: every node again, whatever it showed
        again = _measure_pairs(v, hosts, pairs, [top], f"bandwidth:r{k + 1}")
        for h, b in _best(again.get("rows", []), top, hosts).items():
            seen[h].append(b)
    for k in range(v.level.confirm if v.cfg.repeats == 1 else 0):
        median = metrics.percentile([x for xs in seen.values() for x in xs[:1]], 50)
        suspects = [h for h, xs in seen.items() if judge_relative(xs[-1], median, tol)[0] != "PASS"]
        if not suspects:
            break
        # Run-to-run spread is real (shared links, other jobs): a node is slow only if it stays slow.
        again = _measure_pairs(v, hosts, pairs, [top], f"bandwidth:confirm{k + 1}")
        for h, b in _best(again.get("rows", []), top, hosts).items():
            if h in suspects:
                seen[h].append(b)
    median = metrics.percentile([xs[0] for xs in seen.values()], 50)
    best = {h: metrics.percentile(xs, 50) for h, xs in seen.items()}
    v.figures["node_busbw"] = best
    for h in hosts:
        bad = sorted(g for g in wrong if h in g.split("+"))
        status, dev = judge_relative(best[h], median, tol)
        verdicts = [judge_relative(x, median, tol)[0] for x in seen[h]]
        low = sum(s != "PASS" for s in verdicts)
        if v.cfg.repeats > 1:  # FAIL only when it failed every time, WARN when it failed some
            status = "FAIL" if all(s == "FAIL" for s in verdicts) else "WARN" if low else "PASS"
        reason = (f"best pair {_pct(dev)} from the nodes' median (WARN below {_pct(tol.warn_lower)}, FAIL below "
                  f"{_pct(tol.fail_lower)}) at {top} B, the gradient's size; below the WARN line in {low} of "
                  f"{len(seen[h])} measurement(s)")
        if tol.floor is not None and best[h] < tol.floor:
            reason = f"below the floor of {_rate(tol.floor)}; " + reason
        if bad:
            status, reason = "FAIL", f"wrong values after all-reduce in {', '.join(bad)}; " + reason
        v.add("bandwidth", h, status, f"{_rate(best[h])} busbw", f"median {_rate(median)}", reason, t0=t0)
    whole = next(r for r in rec["rows"] if r["size"] == top and r["group"] == "all")
    status, dev = judge_relative(whole["busbw"], median, tol)
    # The whole set's ring runs at its slowest link: a slow node shows here too, and its own row names it.
    v.add("bandwidth", CLUSTER, "FAIL" if "all" in wrong else ("WARN" if status == "FAIL" else "PASS"),
          f"{_rate(whole['busbw'])} busbw, {len(hosts)} nodes", f"node median {_rate(median)}",
          f"whole-set all-reduce at {top} B, {_pct(dev)} from the nodes' median; #wrong {whole['wrong']}", t0=t0)
