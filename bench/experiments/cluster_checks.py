"""The cluster-wide checks of `bench validate`, after the per-node ones: training, stragglers, scaling.

training runs one short data-parallel job over the nodes still good;
stragglers names the slowest GPU, node or link (bench.analysis.stragglers)
and scaling sets the predicted data-parallel efficiency beside the measured
one (bench.analysis.metrics).
"""

from __future__ import annotations

import math
from dataclasses import replace
import time

from bench.analysis import compare, metrics
from bench.analysis.stragglers import find
from bench.analysis.volume import comm_bytes_per_element
from bench.core.errors import BadInput
from bench.experiments.node_checks import STRAGGLER_WARN, _rate, _summary, solo_runs
from bench.experiments.validation import CLUSTER, Validation, run_one

ORDER = ("preflight", "inventory", "throughput", "bandwidth", "training", "stragglers", "scaling")
PER_NODE = {"preflight", "inventory", "throughput", "bandwidth"}
# Ranks of one data-parallel run see different shards: their final losses differ, but not by this much.
LOSS_AGREEMENT = 0.5


def training(v: Validation) -> None:
    t0 = time.time()
    if not v.good:
        v.add("training", CLUSTER, "SKIP", reason="no good node left")
        return
    hosts = {h: v.resources[h] for h in v.good}
    measured_alone = set(v.figures["node_images_per_s"])
    if len(hosts) > 1 and measured_alone > set(hosts):
        # Nodes may share cores, a switch or a power budget: the single-node reference for the efficiency is
        # measured with the same nodes busy as in the data-parallel run, not with the ones since left out.
        _, solo = solo_runs(v, list(hosts), "reference")
        v.figures["reference"] = {h: {"images_per_s": s["images_per_s"], "samples": s["samples"]}
                                  for h, s in solo.items()}
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
    v.figures["rank_compute_s"] = {f"{r['host']}:{r['local_rank']}": _own_work(r) for r in ranks}
    v.figures.setdefault("params", (summary.get("model") or {}).get("params"))
    v.add("training", CLUSTER, "FAIL" if problems else "PASS",
          f"{fig['images_per_s']:.1f} img/s, world {fig['world_size']}, loss {fig['loss']['first']:.3f} -> "
          f"{fig['loss']['last']:.3f}", f"world size {world}, loss falls, ranks agree",
          "; ".join(problems) or f"{len(ranks)} ranks, {steps.pop() if steps else '?'} steps each", t0=t0)


def _own_work(rank: dict) -> float:
    """A rank's mean step minus its time with a collective in flight: its own work, waiting left out.

    In a synchronous step every rank's wall-clock step equals the slowest's;
    the difference is spent inside the collectives, waiting for it.
    """
    steps = rank["step_s"]
    comm = [s.get("seconds") or 0.0 for s in (rank.get("comm_steps") or [])[rank.get("warmup_steps", 0):]]
    return max(sum(steps) / len(steps) - (sum(comm) / len(comm) if comm else 0.0), 1e-9)


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
                 grad_bytes=params * comm_bytes_per_element(v.cfg.precision), n=max(n, len(v.figures["node_busbw"])))
    v.figures["stragglers"] = [s.to_dict() for s in found]
    if not found:
        v.add("stragglers", CLUSTER, "SKIP", reason="fewer than two nodes or ranks measured")
        return
    top = found[0]
    # A cost within what the nodes' means move run to run (3 standard errors) is noise, not a straggler.
    noise = 3 * max((v.figures.get("node_step_se") or {}).values(), default=0.0)
    line = max(STRAGGLER_WARN, noise)
    status = "WARN" if top.cost >= line else "PASS"
    where = f"{top.host}:{top.slot}" if top.slot is not None else top.host
    if top.kind == "node" and v.figures.get("node_rounds") == 2:
        top = replace(top, reason=f"{top.reason} (every node measured twice, its faster round kept)")
    v.add("stragglers", CLUSTER, status, f"{top.kind} {where}: costs {top.cost:.1%}",
          f"WARN at {line:.0%} (the larger of {STRAGGLER_WARN:.0%} and 3 standard errors of a node's mean step, "
          f"{noise:.0%})",
          f"{top.reason}; to drop it: --exclude {top.exclude}" if status == "WARN" else
          f"the slowest part ({top.reason}) costs less than the WARN line: no straggler")


def scaling(v: Validation) -> None:
    dp = v.figures.get("dp")
    params = v.figures.get("params")
    ref = v.figures.get("reference") or {h: {"images_per_s": x, "samples": (v.figures.get("node_step_samples") or {})
                                                 .get(h, [])} for h, x in v.figures["node_images_per_s"].items()}
    solo = {h: ref[h]["images_per_s"] for h in (dp or {}).get("hosts", []) if h in ref}
    if not dp or not params or not solo:
        v.add("scaling", CLUSTER, "SKIP", reason="needs the per-node throughput and the data-parallel run")
        return
    n, grad = dp["world_size"], params * comm_bytes_per_element(v.cfg.precision)
    # The step of the median node: measured efficiency divides by n x the median node's throughput too.
    t_compute = v.level.micro_batch / metrics.percentile(list(solo.values()), 50)
    pools = [ref[h]["samples"] for h in dp["hosts"] for _ in v.resources[h] if ref.get(h, {}).get("samples")]
    # Every rank waits for the slowest each step: the expected slowest of one draw per rank.
    t_sync = metrics.expected_slowest(pools) if len(pools) == n else t_compute
    rows = v.figures.get("busbw_rows") or []
    members = set(dp["hosts"])
    same_set = members == set(v.figures["node_busbw"])
    # The training's own message: the whole gradient, over the same set of nodes where measured so.
    size = max((r["size"] for r in rows), default=0)
    usable = [r for r in rows if r["size"] == size and ((r["group"] == "all" and same_set) or
              (r["group"] != "all" and set(r["group"].split("+")) <= members))]
    if n > 1 and not usable:
        v.add("scaling", CLUSTER, "SKIP", reason="no bus bandwidth measured between the training nodes")
        return
    whole = [r for r in usable if r["group"] == "all"]
    busbw = (whole or [min(usable, key=lambda r: r["busbw"])])[0]["busbw"] if n > 1 else 1.0
    predicted = metrics.predicted_dp_efficiency(t_compute, grad, busbw, n, t_sync_s=max(t_sync, t_compute))
    # The slowest-of-n wait assumes each node's step jitter is its own (independent nodes). Where the nodes'
    # jitter is shared (nodes that time-slice the same cores, one OS tick) they slow down together and no one
    # waits: the model without the wait bounds that case from above.
    upper = metrics.predicted_dp_efficiency(t_compute, grad, busbw, n)
    measured = dp["images_per_s"] / (n * metrics.percentile(list(solo.values()), 50))
    v.figures["scaling"] = {"predicted": predicted, "predicted_without_jitter": upper, "measured": measured, "n": n,
                            "t_compute_s": t_compute,
                            "t_sync_s": t_sync, "grad_bytes": grad, "busbw": busbw, "busbw_size": size,
                            "t_comm_s": metrics.allreduce_seconds(grad, busbw, n) if n > 1 else 0.0}
    short = measured < 0.5 * predicted
    v.add("scaling", CLUSTER, "WARN" if short else "PASS", f"measured {measured:.0%} at {n} ranks",
          f"predicted {predicted:.0%} ({upper:.0%} if the nodes' step jitter is shared)",
          f"model: {t_compute * 1e3:.1f} ms compute, the slowest of {n} ranks {t_sync * 1e3:.1f} ms, "
          f"{grad / 1e6:.3g} MB gradients at {_rate(busbw)}"
          + ("; under half the prediction: something the model leaves out (stragglers, contention, latency)"
             if short else "")
          + ("; measured above 100%: the single-node runs and the data-parallel run did not see the same load "
             "(other work on the nodes?), so neither figure is the nodes' own" if measured > 1.05 else ""))


def load_baseline(cfg) -> tuple[dict, float] | None:
    """--baseline's passing validate records as compare samples, and the threshold; None without --baseline."""
    if cfg.baseline is None:
        return None
    limit = compare.parse_threshold(cfg.threshold)
    records, _ = compare.load(cfg.baseline)
    validates = [r for r in records if r.get("kind") == "validate" and r.get("level") == cfg.level]
    got = compare.samples(validates)
    if not got:
        raise BadInput(f"--baseline: {cfg.baseline} holds no passing validate record at --level {cfg.level}")
    return got, limit


def against_baseline(v: Validation, base: dict, limit: float) -> None:
    """One `baseline` check per node (and the cluster) with a figure in both: FAIL where it regressed."""
    t0 = time.time()
    now = compare.samples([{"kind": "validate", "status": "ok", "level": v.cfg.level, "measured": v.figures}])
    result = compare.compare(base, now, limit)
    prefix = f"validate {v.cfg.level} "
    by_node: dict[str, list] = {}
    for row in result.rows:
        if row.figure in compare.JUDGED:
            name = row.subject[len(prefix):]
            by_node.setdefault(CLUSTER if name.startswith("cluster") else name, []).append(row)
    for node, rows in by_node.items():
        bad = [r for r in rows if r.verdict == "regressed"]
        shown = "; ".join(f"{r.figure} {r.change:+.1%}" for r in rows)
        spread = [f"{r.figure} spread {r.spread:.1%}" if r.spread is not None else f"{r.figure}: one run a side"
                  for r in rows]
        v.add("baseline", node, "FAIL" if bad else "PASS", shown,
              f"{v.cfg.baseline} (threshold {limit:.0%})",
              ("regressed: " + ", ".join(r.figure for r in bad) + "; " if bad else "") + "; ".join(spread), t0=t0)
    if not by_node:
        v.add("baseline", CLUSTER, "SKIP", reason=f"nothing measured here was measured in {v.cfg.baseline}")


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
