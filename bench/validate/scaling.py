"""validate's last two checks, for the cluster: who holds it back (stragglers) and what it should reach (scaling).

stragglers names the costliest of three views (bench.analysis.stragglers):
each GPU alone (the per-GPU runs), each rank's own work in the
data-parallel run (where its collective time is measured) and each node's
link; the exclude string is printed only when the cost is over the line.
scaling sets the predicted data-parallel efficiency
(metrics.predicted_dp_efficiency: the median GPU's step, the gradients,
the bus bandwidth measured over the training's own set of GPUs) beside
the measured one.
"""

from __future__ import annotations

from bench.analysis import metrics
from bench.analysis.stragglers import Straggler, find
from bench.analysis.volume import comm_bytes_per_element
from bench.validate.gpu_rounds import straggler_line
from bench.validate.gpus import STRAGGLER_WARN
from bench.validate.links import rate
from bench.validate.state import CLUSTER, Validation


def _slot_key(name: str) -> tuple[str, int]:
    host, slot = name.rsplit(":", 1)
    return host, int(slot)


def _rank_view(v: Validation) -> dict[tuple[str, int], float]:
    """The data-parallel run's per-rank own work keyed by (host, slot): a rank is local rank k of its node."""
    host_of = {name: h for h, name in v.hostname_of.items()}
    res = (v.figures.get("dp") or {}).get("resources") or {}
    out = {}
    for key, t in (v.figures.get("rank_compute_s") or {}).items():
        if t is None:
            continue
        name, local = key.rsplit(":", 1)
        host = host_of.get(name, name)
        slots = res.get(host) or []
        out[(host, slots[int(local)] if int(local) < len(slots) else int(local))] = t
    return out


def _peer_noise(v: Validation, top: Straggler) -> float | None:
    """For a GPU alone, the noise line its model's GPUs were judged by (gpus.throughput's per-GPU lines), if any."""
    if top.kind != "gpu" or top.slot is None:
        return None
    lines = (v.figures.get("gpu_lines") or {}).get(v.gpu_name(top.host, top.slot))
    return lines["noise"] if lines else None


def stragglers(v: Validation) -> None:
    gpu_step = {_slot_key(k): v.workload[2] / x for k, x in v.figures["gpu_images_per_s"].items() if x}
    params = v.figures.get("params") or 0
    n = (v.figures.get("dp") or {}).get("world_size") or sum(len(s) for s in v.resources.values())
    samples = [len(xs) for xs in (v.figures.get("gpu_step_samples") or {}).values()]
    found = find(gpu_step_s=gpu_step, rank_compute_s=_rank_view(v), node_busbw=v.figures["node_busbw"],
                 grad_bytes=params * comm_bytes_per_element(v.cfg.precision), n=max(n, len(v.figures["node_busbw"])),
                 gpu_steps=min(samples) if samples else None, rank_steps=v.level.dp_steps - v.level.timing_warmup)
    v.figures["stragglers"] = [s.to_dict() for s in found]
    rank_note = (f"; the data-parallel run's rank view is null: {v.figures['rank_compute_reason']}"
                 if v.figures.get("rank_compute_reason") else "")
    if not found:
        v.add("stragglers", CLUSTER, "SKIP", reason="fewer than two GPUs or nodes measured" + rank_note)
        return
    top = found[0]
    line, noise = straggler_line(list((v.figures.get("gpu_step_se") or {}).values()))
    how = f"the larger of {STRAGGLER_WARN:.0%} and 3 standard errors of the median GPU's mean step, {noise:.0%}"
    peers = _peer_noise(v, top)
    if peers is not None and peers > line:
        # The GPU's own row judged the same figure against its peers' spread: a shortfall inside that noise cannot
        # be told from luck here (CPU ranks time-slicing shared cores), and one check must not call it a straggler
        # while the other passes it.
        line, how = peers, f"its model's per-GPU noise line, {peers:.0%}, above {how}"
    named = top.cost >= line
    where = f"{top.host}:{top.slot}" if top.slot is not None else top.host
    reason = top.reason + (" (every GPU measured twice, its faster round kept)"
                           if top.kind == "gpu" and v.figures.get("gpu_rounds") == 2 else "")
    if named:
        v.figures["straggler"] = top.to_dict()
    v.add("stragglers", CLUSTER, "WARN" if named else "PASS", f"{top.kind} {where}: costs {top.cost:.1%}",
          f"WARN at {line:.0%} ({how})",
          (f"{reason}; to drop it: --exclude {top.exclude}" if named else
           f"the slowest part ({reason}) costs less than the WARN line: no straggler") + rank_note)


def _busbw_for(v: Validation, hosts: list[str], n: int) -> tuple[float | None, str]:
    """The bus bandwidth the training's all-reduce meets: measured over the same set where it was."""
    if n < 2:
        return 1.0, "one rank: no all-reduce"
    if len(hosts) == 1:
        bw = v.figures["intra_busbw"].get(hosts[0])
        return bw, "the node's own all-reduce"
    whole = v.figures.get("inter_all")
    if whole and set(hosts) == set(v.figures["node_busbw"]) and whole.get("ranks") == n:
        return whole["busbw"], "the whole set's all-reduce"
    pairs = {k: x for k, x in (v.figures.get("pair_busbw") or {}).items() if set(k.split("+")) <= set(hosts)}
    if pairs:
        return min(pairs.values()), "the slowest pair among the training nodes"
    return None, "no bus bandwidth measured between the training nodes"


def scaling(v: Validation) -> None:
    dp, params = v.figures.get("dp"), v.figures.get("params")
    res = (dp or {}).get("resources") or {}
    keys = [f"{h}:{s}" for h, slots in res.items() for s in slots]
    solo = [v.figures["gpu_images_per_s"][k] for k in keys if v.figures["gpu_images_per_s"].get(k)]
    if not dp or not params or len(solo) != len(keys):
        v.add("scaling", CLUSTER, "SKIP", reason="needs every training GPU's throughput alone and the data-parallel "
              "run")
        return
    n, grad = dp["world_size"], params * comm_bytes_per_element(v.cfg.precision)
    busbw, where = _busbw_for(v, list(res), n)
    if busbw is None:
        v.add("scaling", CLUSTER, "SKIP", reason=where)
        return
    median_ips = metrics.percentile(solo, 50)
    t_compute = v.workload[2] / median_ips
    pools = [(v.figures.get("gpu_step_samples") or {}).get(k) or [] for k in keys]
    # Every rank waits for the slowest each step: the expected slowest of one draw per rank.
    t_sync = metrics.expected_slowest(pools) if all(pools) else t_compute
    predicted = metrics.predicted_dp_efficiency(t_compute, grad, busbw, n, t_sync_s=max(t_sync, t_compute))
    # The slowest-of-n wait assumes each GPU's step jitter is its own. Where the jitter is shared (ranks that
    # time-slice the same cores, one OS tick) they slow down together and no one waits: the model without the
    # wait bounds that case from above.
    upper = metrics.predicted_dp_efficiency(t_compute, grad, busbw, n)
    measured = dp["images_per_s"] / (n * median_ips)
    v.figures["scaling"] = {"predicted": predicted, "predicted_without_jitter": upper, "measured": measured, "n": n,
                            "t_compute_s": t_compute, "t_sync_s": t_sync, "grad_bytes": grad, "busbw": busbw,
                            "busbw_from": where,
                            "t_comm_s": metrics.allreduce_seconds(grad, busbw, n) if n > 1 else 0.0}
    short = measured < 0.5 * predicted
    v.add("scaling", CLUSTER, "WARN" if short else "PASS", f"measured {measured:.0%} at {n} ranks",
          f"predicted {predicted:.0%} ({upper:.0%} if the ranks' step jitter is shared)",
          f"model: {t_compute * 1e3:.1f} ms compute, the slowest of {n} ranks {t_sync * 1e3:.1f} ms, "
          f"{grad / 1e6:.3g} MB gradients at {rate(busbw)} ({where})"
          + ("; under half the prediction: something the model leaves out (stragglers, contention, latency)"
             if short else "")
          + ("; measured above 100%: the per-GPU runs and the data-parallel run did not see the same load "
             "(other work on the nodes?), so neither figure is the nodes' own" if measured > 1.05 else ""))
