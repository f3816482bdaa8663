"""The cluster-wide checks of `bench validate`, after the per-node ones: training, stragglers, scaling.

training runs one short data-parallel job over the nodes still good;
stragglers names the slowest GPU, node or link (bench.analysis.stragglers)
and scaling sets the predicted data-parallel efficiency beside the measured
one (bench.analysis.metrics).
"""

from __future__ import annotations

import math
import time

from bench.analysis import metrics
from bench.analysis.stragglers import find
from bench.experiments.node_checks import _rate, _summary
from bench.experiments.validation import CLUSTER, Validation, run_one

ORDER = ("preflight", "inventory", "throughput", "bandwidth", "training", "stragglers", "scaling")
PER_NODE = {"preflight", "inventory", "throughput", "bandwidth"}
# Ranks of one data-parallel run see different shards: their final losses differ, but not by this much.
LOSS_AGREEMENT = 0.5
STRAGGLER_WARN = 0.10


def training(v: Validation) -> None:
    t0 = time.time()
    if not v.good:
        v.add("training", CLUSTER, "SKIP", reason="no good node left")
        return
    hosts = {h: v.resources[h] for h in v.good}
    rec = run_one(v, hosts, v.level.dp_steps)
    v.runs["training"] = rec.get("run_dir", "")
    world = sum(len(s) for s in hosts.values())
    if rec.get("status") != "ok":
        err = rec.get("error") or {}
        v.add("training", CLUSTER, "FAIL", reference=f"world size {world}",
              reason=f"data-parallel run failed at {err.get('where')}: {err.get('reason')}", t0=t0)
        return
    fig, summary = rec["figures"], _summary(rec)
    ranks = summary.get("ranks") or []
    problems = [f"{k} is false" for k, ok in fig["sanity"].items() if not ok]
    steps = {r.get("total_steps", len(r["loss"])) for r in ranks}
    if len(steps) > 1:
        problems.append(f"ranks ran different step counts: {sorted(steps)}")
    finals = [r["loss"][-1] for r in ranks]
    if finals:
        med = metrics.percentile(finals, 50)
        off = [r["rank"] for r in ranks if not math.isfinite(r["loss"][-1]) or
               abs(r["loss"][-1] - med) > LOSS_AGREEMENT * abs(med)]
        if off:
            problems.append(f"rank(s) {off} ended far from the median final loss {med:.3f}")
    v.figures["dp"] = {"world_size": fig["world_size"], "images_per_s": fig["images_per_s"], "hosts": list(hosts)}
    v.figures["rank_compute_s"] = {f"{r['host']}:{r['local_rank']}": r["parts_s"]["forward"] +
                                   max(r["parts_s"]["backward"] - r["parts_s"]["allreduce"], 0.0) for r in ranks}
    v.figures.setdefault("params", (summary.get("model") or {}).get("params"))
    v.add("training", CLUSTER, "FAIL" if problems else "PASS",
          f"{fig['images_per_s']:.1f} img/s, world {fig['world_size']}, loss {fig['loss']['first']:.3f} -> "
          f"{fig['loss']['last']:.3f}", f"world size {world}, loss falls, ranks agree",
          "; ".join(problems) or f"{len(ranks)} ranks, {steps.pop() if steps else '?'} steps each", t0=t0)


def stragglers(v: Validation) -> None:
    host_of = {name: h for h, name in v.hostname_of.items()}
    ranks = {}
    for key, t in (v.figures.get("rank_compute_s") or {}).items():
        name, local = key.rsplit(":", 1)
        host = host_of.get(name, name)
        slots = v.resources.get(host, [int(local)])
        ranks[(host, slots[int(local)] if int(local) < len(slots) else int(local))] = t
    params = v.figures.get("params") or 0
    n = (v.figures.get("dp") or {}).get("world_size") or len(v.resources)
    found = find(rank_compute_s=ranks, node_step_s=v.figures["node_step_s"], node_busbw=v.figures["node_busbw"],
                 grad_bytes=4.0 * params, n=max(n, len(v.figures["node_busbw"])))
    v.figures["stragglers"] = [s.to_dict() for s in found]
    if not found:
        v.add("stragglers", CLUSTER, "SKIP", reason="fewer than two nodes or ranks measured")
        return
    top = found[0]
    status = "WARN" if top.cost >= STRAGGLER_WARN else "PASS"
    where = f"{top.host}:{top.slot}" if top.slot is not None else top.host
    v.add("stragglers", CLUSTER, status, f"{top.kind} {where}: costs {top.cost:.1%}",
          f"WARN at {STRAGGLER_WARN:.0%}", f"{top.reason}; to drop it: --exclude {top.exclude}")


def _nearest(rows: list[dict], nbytes: float) -> dict:
    return min(rows, key=lambda r: abs(math.log(r["size"]) - math.log(max(nbytes, 1))))


def scaling(v: Validation) -> None:
    dp = v.figures.get("dp")
    params = v.figures.get("params")
    solo = {h: v.figures["node_images_per_s"][h] for h in (dp or {}).get("hosts", []) if h in
            v.figures["node_images_per_s"]}
    if not dp or not params or not solo:
        v.add("scaling", CLUSTER, "SKIP", reason="needs the per-node throughput and the data-parallel run")
        return
    n, grad = dp["world_size"], 4.0 * params
    t_compute = metrics.percentile([v.figures["node_step_s"][h] for h in solo], 50)
    rows = v.figures.get("busbw_rows") or []
    members = set(dp["hosts"])
    same_set = members == set(v.figures["node_busbw"])
    usable = [r for r in rows if (r["group"] == "all" and same_set) or
              (r["group"] != "all" and set(r["group"].split("+")) <= members)]
    if n > 1 and not usable:
        v.add("scaling", CLUSTER, "SKIP", reason="no bus bandwidth measured between the training nodes")
        return
    busbw = min(r["busbw"] for r in usable if r["size"] == _nearest(usable, grad)["size"]) if n > 1 else 1.0
    predicted = metrics.predicted_dp_efficiency(t_compute, grad, busbw, n)
    measured = dp["images_per_s"] / (n * metrics.percentile(list(solo.values()), 50))
    v.figures["scaling"] = {"predicted": predicted, "measured": measured, "n": n, "t_compute_s": t_compute,
                            "grad_bytes": grad, "busbw": busbw}
    short = measured < 0.5 * predicted
    v.add("scaling", CLUSTER, "WARN" if short else "PASS", f"measured {measured:.0%} at {n} ranks",
          f"predicted {predicted:.0%}",
          f"model: {t_compute * 1e3:.1f} ms compute, {grad / 1e6:.3g} MB gradients at {_rate(busbw)}"
          + ("; under half the prediction: something the model leaves out (stragglers, contention, latency)"
             if short else ""))


def skip_rest(v: Validation, stage, why: str = "--fail-fast: not run after a FAIL") -> None:
    """This check is not run; every node it would cover gets a SKIP row saying why."""
    name = stage.__name__
    if name == "inventory":
        for h in v.resources:
            v.add("inventory", h, "SKIP", reason=why)
        v.add("heterogeneity", CLUSTER, "SKIP", reason=why)
        return
    if name in PER_NODE:
        for h in v.resources:
            v.add(name, h, "SKIP", reason=why)
    if name in ("bandwidth", "training", "stragglers", "scaling"):
        v.add(name, CLUSTER, "SKIP", reason=why)
