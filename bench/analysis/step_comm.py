"""Communication per training step, from the ranks' counters: sent by the algorithm, in flight, on the wire.

    comm = comm_figures(ranks, step_mean, params, world, strategy, bytes_per_element, accum)
    comm["bytes_per_step"]      # what a rank's algorithm sent per step: S x collectives.SENT[backend] per call
    comm["wire"]["bytes_per_step"]   # what the hosts' NIC / InfiniBand counters saw, per rank and step

Three figures of one thing, each named for what it is (docs/metrics.md,
"Communication per step"): the bytes the collectives' algorithms send (exact
from the calls, the same on every machine), the time a collective was in
flight (host clock; null on GPUs), and the bytes the OS counted leaving each
host (where it can count them: bench.worker.wire), beside the first.
"""

from __future__ import annotations

from typing import Any

from bench.analysis import volume


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


COMM_TIMING = ("host clock: per step, the time at least one collective was in flight (issue to completion, "
               "overlapping calls counted once; CPU/gloo: completion is when the bytes have moved)")


SENT_BY = ("sent by the algorithm: per call S x the backend's factor for the op and the group's size "
           "(bench.core.collectives.SENT[{backend}]), summed over the step's calls; not a wire count")
WIRE_ONE_HOST = ("one host: its ranks talk over loopback or shared memory (NVLink, PCIe on GPUs), which no NIC or "
                 "InfiniBand port counts")
WIRE_SHARED_HOST = ("several ranks per host: what they send each other stays on the host, unseen by the counters, "
                    "so the wire holds less than they sent")


def wire_figures(ranks: list[dict[str, Any]], sent_per_step: float) -> dict[str, Any]:
    """Per rank and steady step, the bytes each host's counters saw leave it (bench.worker.wire), over its ranks."""
    hosts: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        hosts.setdefault(r["host"], []).append(r)
    if len(hosts) < 2:
        return {"bytes_per_step": None, "reason": WIRE_ONE_HOST}
    per_host = []
    for host, rs in sorted(hosts.items()):
        w = next((r["wire"] for r in rs if r.get("wire")), None)
        if not w or w.get("bytes") is None:
            why = (w or {}).get("reason") or "no rank of it read the counters"
            return {"bytes_per_step": None, "reason": f"{host}: {why}"}
        steps = min(r["steady_steps"] for r in rs)
        per_host.append({"host": host, "ranks": len(rs), "bytes": w["bytes"], "source": w["source"],
                         "bytes_per_step_per_rank": w["bytes"] / steps / len(rs),
                         "nic": w.get("nic") or {}, "ib": w.get("ib") or {},
                         **({"saturated": w["saturated"]} if w.get("saturated") else {})})
    mean = _mean([h["bytes_per_step_per_rank"] for h in per_host])
    out = {"bytes_per_step": mean, "over_sent": mean / sent_per_step if sent_per_step else None,
           "per_host": per_host, "what": "bytes the hosts' NIC tx / InfiniBand port_xmit_data counters rose by over "
           "the steady steps (headers and any other traffic of those interfaces included), per rank and step"}
    if any(h["ranks"] > 1 for h in per_host):
        out["note"] = WIRE_SHARED_HOST
    return out


def tensor_parallel_figures(ranks: list[dict[str, Any]], tp: dict[str, Any]) -> dict[str, Any]:
    """The TP group's collectives (comm_counter's by_group "tensor_parallel") beside Megatron's figure."""
    per_rank = []
    calls = None
    for r in ranks:
        steps = (r.get("comm_steps") or [])[r["warmup_steps"]:]
        groups = [(s.get("by_group") or {}).get("tensor_parallel") or {} for s in steps]
        if not groups:
            return {"bytes_per_step": None, "reason": "the ranks recorded no steps"}
        per_rank.append({"rank": r["rank"], "bytes_per_step": _mean([g.get("sent_bytes", 0.0) for g in groups]),
                         "buffer_bytes_per_step": _mean([g.get("buffer_bytes", 0.0) for g in groups])})
        if calls is None:
            calls = _mean([g.get("calls", 0) for g in groups])
    sent = _mean([p["bytes_per_step"] for p in per_rank])
    analytic = volume.tensor_parallel_comm_bytes(
        depth=tp["depth"], micro_batch=tp["micro_batch"], tokens=tp["tokens"], width=tp["width"], tensor=tp["size"],
        bytes_per_element=tp["bytes_per_element"], accum=tp["accum"], recompute=tp["recompute"])
    return {"bytes_per_step": sent, "calls_per_step_rank0": calls, "per_rank": per_rank,
            "what": "the collectives over each rank's tensor-parallel group (its activation all-reduces, and "
                    "the TP part of gradient clipping), sent by the algorithm",
            "analytic": {"bytes_per_step": analytic, "formula": volume.tensor_parallel_formula(tp["recompute"]),
                         **{k: tp[k] for k in ("depth", "micro_batch", "tokens", "width", "size", "accum",
                                               "bytes_per_element")}},
            "measured_over_analytic": sent / analytic if analytic else None}


def comm_figures(ranks: list[dict[str, Any]], step_mean: float, params: int | None, world: int, strategy: str,
                 bytes_per_element: int, accum: int = 1,
                 reduce_bytes_per_element: int | None = None, tp: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per rank and step, what the training's collectives moved and how long they were in flight (docs/metrics.md).

    Steady steps only. bytes_per_step is what a rank's algorithm sends (S x the backend's factor,
    summed over its calls: SENT_BY); `wire` what the hosts' counters saw; the analytic volume is
    bench.analysis.volume's (the ZeRO paper's, ring figures). With tensor parallelism (tp: the group's
    size and the activations' shape), params is Psi_T and world the data-parallel degree D; the analytic
    volume is then the data-parallel one plus Megatron's, and `tensor_parallel` holds the TP group's own.
    """
    per_rank, ops = [], {}
    for r in ranks:
        steps = (r.get("comm_steps") or [])[r["warmup_steps"]:]
        if not steps:
            return {"bytes_per_step": None, "seconds_per_step": None, "reason": "the ranks recorded no collectives"}
        sent = _mean([sum(o["sent_bytes"] for o in s["ops"].values()) for s in steps])
        secs = None if r.get("comm_timing") else _mean([s["seconds"] for s in steps])
        per_rank.append({"rank": r["rank"], "bytes_per_step": sent, "seconds_per_step": secs})
        if r is ranks[0]:
            for name in sorted({k for s in steps for k in s["ops"]}):
                calls = [s["ops"].get(name) for s in steps]
                ops[name] = {key: _mean([(c or {}).get(key) or 0.0 for c in calls])
                             for key in ("calls", "buffer_bytes", "sent_bytes")}
                ops[name]["seconds"] = None if secs is None else _mean([(c or {}).get("seconds") or 0.0 for c in calls])
    seconds = None if any(p["seconds_per_step"] is None for p in per_rank) else _mean(
        [p["seconds_per_step"] for p in per_rank])
    sent = _mean([p["bytes_per_step"] for p in per_rank])
    backend = ranks[0].get("comm_backend")
    out: dict[str, Any] = {
        "bytes_per_step": sent, "seconds_per_step": seconds,
        "sent_by": SENT_BY.format(backend=backend) if backend else "sent by the algorithm: S x the ring's factor "
        "(recorded before the backend was)",
        "per_rank": per_rank, "ops_rank0": ops, "timing": ranks[0].get("comm_timing") or COMM_TIMING,
        "wire": wire_figures(ranks, sent)}
    if strategy == "pipeline":
        out["analytic"] = None
        out["analytic_reason"] = volume.PIPELINE_COMM
    elif params:
        analytic = volume.analytic_comm_bytes(params, bytes_per_element, world, strategy, accum,
                                              reduce_bytes_per_element)
        formula = volume.analytic_formula(strategy, accum)
        if reduce_bytes_per_element is not None and reduce_bytes_per_element != bytes_per_element:
            formula += f"; the gradient reduction at {reduce_bytes_per_element} bytes per element"
        out["analytic"] = {"bytes_per_step": analytic, "formula": formula,
                           "params": params, "bytes_per_element": bytes_per_element, "n": world, "m": accum}
        if tp:
            out["tensor_parallel"] = tensor_parallel_figures(ranks, tp)
            part = out["tensor_parallel"]["analytic"]
            out["analytic"] = {**out["analytic"], "bytes_per_step": analytic + part["bytes_per_step"],
                               "formula": f"{formula} over Psi_T and D + {part['formula']}",
                               "parts": {"data_parallel": out["analytic"], "tensor_parallel": part}}
            analytic = out["analytic"]["bytes_per_step"]
        out["measured_over_analytic"] = out["bytes_per_step"] / analytic if analytic else None
    return out


