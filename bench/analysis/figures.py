"""The ranks' summary.json -> the figures of a run record (every formula from metrics)."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.core import gpus
from bench.analysis import metrics, stats, volume
from bench.analysis.step_comm import comm_figures

CPU_NO_PEAK = "CPU: the GPU table has no CPU peak, so no MFU"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def loss_fell(curve: list[float]) -> bool:
    """Mean loss of the last quarter of the steps below that of the first quarter."""
    if len(curve) < 4:
        return len(curve) >= 2 and curve[-1] < curve[0]
    q = max(len(curve) // 4, 1)
    return _mean(curve[-q:]) < _mean(curve[:q])


def peak_flops_of(device: str, precision: str) -> tuple[float | None, str | None]:
    """(dense peak FLOP/s of one GPU for `precision`, None) from bench/gpus.py's table, or (None, why).

    `device` is the name the rank's torch reported (torch.cuda.get_device_name),
    or "cpu". fp32 means the CUDA cores' FP32 peak: torch leaves TF32 matmuls
    off by default, so fp32 training does not run on the tensor cores.
    """
    if device.strip().casefold() in ("", "cpu"):
        return None, CPU_NO_PEAK
    spec = gpus.lookup(device)
    if spec is None:
        return None, f"GPU {device!r} is not in bench/data/gpu_specs.json or amd_gpu_specs.json, so no MFU"
    tf = gpus.peak_tflops(spec, precision)
    if tf is None:
        return None, f"{spec.name} has no {precision} peak in the GPU table, so no MFU"
    return tf * 1e12, None


def mfu_figures(ranks: list[dict[str, Any]], images_per_s: float, flops_per_image: float | None,
                precision: str | None, peak_flops: float | None = None) -> dict[str, Any]:
    """TFLOP/s and MFU of each rank and of the run (docs/metrics.md: MFU = F_train x images/s / peak).

    Each rank's peak comes from the GPU it ran on and the precision, so a
    mixed cluster divides by the sum of its own peaks; `peak_flops` (one GPU's
    FLOP/s) overrides the table for every rank. The run's MFU is null, with
    `mfu_reason`, when any rank has no peak (CPU, a GPU missing from the table).
    """
    if not flops_per_image:
        return {"mfu": None, "mfu_reason": "no analytic FLOP count for this model (bench/flops.py counts ViTs)"}
    peaks: list[float | None] = []
    reasons: list[str] = []
    for r in ranks:
        if peak_flops:
            peak, why = peak_flops, None
        elif precision:
            peak, why = peak_flops_of(str(r.get("device", "")), precision)
        else:
            peak, why = None, "no precision given, so no peak"
        peaks.append(peak)
        if why and why not in reasons:
            reasons.append(why)
    achieved = [flops_per_image * r["images_per_s"] for r in ranks]
    total = flops_per_image * images_per_s
    known = all(p is not None for p in peaks)
    return {
        "flops_per_image": flops_per_image,
        "tflops": metrics.tflops(total, 1.0),
        "tflops_per_rank": [metrics.tflops(a, 1.0) for a in achieved],
        "peak_tflops_per_rank": [p / 1e12 if p is not None else None for p in peaks],
        "mfu": metrics.mfu(total, sum(peaks)) if known else None,  # type: ignore[arg-type]
        "mfu_per_rank": [metrics.mfu(a, p) if p is not None else None for a, p in zip(achieved, peaks)],
        "mfu_reason": "; ".join(reasons) if reasons else None,
    }


def pipeline_figures(ranks: list[dict[str, Any]], stages: int, micro_batches: int, data_parallel: int,
                     params: int | None) -> dict[str, Any]:
    """The stages (their layers and parameter counts, from the ranks that hold them), the bubble (docs/metrics.md)."""
    by_stage: dict[int, dict[str, Any]] = {}
    for r in ranks:
        lay = r.get("pipeline") or {}
        if "stage" in lay:
            s = by_stage.setdefault(lay["stage"], {"stage": lay["stage"], "params": lay["stage_params"],
                                                   "layers": lay["stages"][lay["stage"]]["layers"], "ranks": []})
            s["ranks"].append(r["rank"])
    listed = [by_stage[k] for k in sorted(by_stage)]
    total = sum(s["params"] for s in listed)
    return {"stages": stages, "micro_batches": micro_batches, "data_parallel": data_parallel,
            "per_stage": listed, "stage_params_total": total, "model_params": params,
            "bubble": metrics.bubble(stages, micro_batches),
            "bubble_formula": "(P-1)/(m+P-1): the share of a step each stage waits while the pipeline fills "
                              "and drains (GPipe; DeepSpeed's 1F1B schedule has the same)"}


def memory_figures(ranks: list[dict[str, Any]], summary: dict[str, Any], world: int, stage: int | None,
                   precision: str, params: float | None = None) -> dict[str, Any]:
    """Model-state bytes per rank: measured (the tensors held), the ZeRO paper's formula, DeepSpeed's estimate.

    stage None (pipeline stages): no formula; each stage holds its own layers' states (the record's
    per-rank figures and the stages' parameter counts say how much). params: the parameters the formula
    shards over `world` ranks (a TP rank's Psi_T), the model's by default.
    """
    measured = [r.get("model_states") or {} for r in ranks]
    params = params or (summary.get("model") or {}).get("params")
    out = {"measured_per_rank": measured,
           "measured": max(measured, key=lambda m: m.get("total", 0)) if measured else None,
           "formula": volume.model_state_formula(params, world, stage, precision) if params and stage is not None
           else None,
           "deepspeed_estimate": summary.get("deepspeed_estimate"),
           # How the partitions were made (ZeRO-3, FSDP2: from the CPU-built model); null for whole-model engines.
           "sharded_from": (summary.get("model") or {}).get("sharded_from")}
    if stage is None:
        out["formula_reason"] = "pipeline stages hold their own layers' model states: no formula over Psi"
    return out


def epoch_figures(ranks: list[dict[str, Any]], step_mean: float, steps_per_epoch: int,
                  total_steps: int) -> dict[str, Any]:
    """Time per epoch: measured where whole epochs ran, else estimated, and which one it is (docs/metrics.md).

    measured   the mean wall clock of the whole epochs run (each the slowest rank's), warm-up, data
               loading, waits and communication included, evaluation not: what the study's epochs are
    estimated  mean steady step x optimizer steps per epoch: warm-up and what happens between steps
               left out, so it is below a measured epoch; always given as epoch_s_estimate
    """
    estimate = step_mean * steps_per_epoch
    walls = [r.get("epoch_wall_s") or [] for r in ranks]
    whole = min(len(w) for w in walls) if walls else 0
    if whole:
        per_epoch = [max(w[e] for w in walls) for e in range(whole)]
        return {"epoch_s": _mean(per_epoch), "epoch_s_estimated": False, "epoch_s_estimate": estimate,
                "epoch_wall_s": per_epoch,
                "epoch_s_how": f"measured: mean wall clock of {whole} whole epoch(s), the slowest rank's (warm-up, "
                               "data loading and communication included, evaluation not)"}
    return {"epoch_s": estimate, "epoch_s_estimated": True, "epoch_s_estimate": estimate, "epoch_wall_s": [],
            "epoch_s_how": "estimated: mean steady step time x steps per epoch (warm-up and the time between steps "
                           "left out)" + ("; the run was shorter than an epoch" if total_steps < steps_per_epoch
                                         else "")}


def tensor_parallel_figures(ranks: list[dict[str, Any]], tensor: int, data_parallel: int) -> dict[str, Any]:
    """What each rank of a TP group holds of the split (bench.worker.tensor_parallel.describe), and Psi_T."""
    tp = ranks[0]["tensor_parallel"]
    return {"size": tensor, "data_parallel": data_parallel, "how": tp["how"], "split_params": tp["split_params"],
            "replicated_params": tp["replicated_params"],
            "local_split_params_per_rank": [(r.get("tensor_parallel") or {}).get("local_split_params") for r in ranks],
            "params_per_rank": volume.tensor_parallel_local_params(tp["split_params"], tp["replicated_params"],
                                                                   tensor),
            "params_per_rank_formula": "Psi_T = split / T + whole"}


def from_summary(summary: dict[str, Any], *, micro_batch: int, grad_accum: int, planned_world: int,
                 flops_per_image: float | None = None, peak_flops: float | None = None,
                 precision: str | None = None, strategy: str = "zero0",
                 comm_bytes_per_element: int | None = None, pipeline_stages: int = 1,
                 reduce_bytes_per_element: int | None = None, tensor_parallel: int = 1,
                 recompute: bool = False) -> dict[str, Any]:
    """The record's figures of the ranks' summary: pace, training, communication, model states, FLOPs."""
    ranks = sorted(summary["ranks"], key=lambda r: r["rank"])
    # The ranks of one replica (pipeline stages, a TP group) see the same images: a step's are the replicas'.
    data_parallel = summary["world_size"] // (pipeline_stages * tensor_parallel)
    steady = min(r["steady_steps"] for r in ranks)
    step_mean = _mean([_mean(r["step_s"][:steady]) for r in ranks])
    figures = pace_figures(ranks, summary, steady, step_mean, micro_batch * grad_accum * data_parallel,
                           data_parallel)
    figures.update(training_figures(ranks, summary, steady, planned_world))
    params = (summary.get("model") or {}).get("params")
    tp = None
    if tensor_parallel > 1 and ranks[0].get("tensor_parallel"):
        figures["tensor_parallel"] = tensor_parallel_figures(ranks, tensor_parallel, data_parallel)
        params = figures["tensor_parallel"]["params_per_rank"]  # the data-parallel formulas shard Psi_T over D
        t = ranks[0]["tensor_parallel"]
        tp = {"size": tensor_parallel, "depth": t["depth"], "tokens": t["tokens"], "width": t["width"],
              "micro_batch": micro_batch, "accum": grad_accum, "recompute": recompute,
              "bytes_per_element": volume.comm_bytes_per_element(precision or "fp32")}  # activations' dtype
    b = comm_bytes_per_element or volume.comm_bytes_per_element(precision or "fp32")
    figures.update(share_figures(comm_figures(ranks, step_mean, params, data_parallel, strategy, b, grad_accum,
                                              reduce_bytes_per_element, tp), step_mean))
    figures["model_states"] = memory_figures(ranks, summary, data_parallel, volume.sharded_stage(strategy),
                                             precision or "fp32", params)
    figures["model_states_bytes"] = (figures["model_states"]["measured"] or {}).get("total")
    figures.update(mfu_figures(ranks, figures["images_per_s"], flops_per_image, precision, peak_flops))
    if pipeline_stages > 1:
        figures["pipeline"] = pipeline_figures(ranks, pipeline_stages, grad_accum, data_parallel,
                                               (summary.get("model") or {}).get("params"))
    per_rank_flops(figures, pipeline_stages, tensor_parallel if tp else 1)
    return figures


def pace_figures(ranks: list[dict[str, Any]], summary: dict[str, Any], steady: int, step_mean: float,
                 per_step_images: int, data_parallel: int) -> dict[str, Any]:
    """Throughput, step time and its parts, epochs and warm-up: how fast the run went."""
    # Data-parallel ranks step together: the cluster's pace is its slowest rank's.
    slowest_time = max(sum(r["step_s"][:steady]) for r in ranks)
    images_per_s = metrics.images_per_s(per_step_images * steady, slowest_time)
    rank0 = ranks[0]
    step = metrics.summary([t for r in ranks for t in r["step_s"][:steady]])
    if steady < stats.MIN_P90_SAMPLES:
        # The ranks step together: their step times are one sample per step, not one per rank.
        step = dataclasses.replace(step, p90=None, p90_reason=f"{steady} steady step(s) (x {len(ranks)} rank(s), "
                                   f"which step together): a p90 needs at least {stats.MIN_P90_SAMPLES} steps")
    parts = {k: _mean([r["parts_s"][k] for r in ranks]) for k in rank0["parts_s"]} if rank0["parts_s"] else None
    return {
        "world_size": summary["world_size"],
        "global_batch": per_step_images,
        "images_per_s": images_per_s,
        "images_per_s_per_rank": [r["images_per_s"] for r in ranks],
        "images_per_s_per_replica": images_per_s / data_parallel,
        "step_s": dataclasses.asdict(step),
        "step_timing": rank0.get("step_timing"),
        "parts_s": parts,
        "parts_reason": None if parts else rank0.get("parts_reason"),
        "data_share": parts.get("data", 0.0) / step_mean if parts else None,
        "steps_per_epoch": summary["steps_per_epoch"],
        **epoch_figures(ranks, step_mean, summary["steps_per_epoch"], summary["total_steps"]),
        "total_steps": summary["total_steps"],
        "warmup": {"steps": rank0["warmup_steps"], "seconds": rank0["warmup_s"]},
        # Steady steps whose update fp16's loss scaler skipped (overflow): not in step_s, images/s or MFU.
        "skipped_steps": max(r.get("skipped_steps", 0) for r in ranks),
        "peak_memory_bytes": [r["peak_memory_bytes"] for r in ranks],
        "memory_kind": rank0["memory_kind"],
        "memory_note": rank0.get("memory_note"),
        "peak_reserved_bytes": [r.get("peak_reserved_bytes") for r in ranks] if rank0.get("peak_reserved_bytes")
        is not None else None,
        "device_used_bytes": [r.get("device_used_bytes") for r in ranks] if rank0.get("device_used_bytes")
        is not None else None,
    }


def training_figures(ranks: list[dict[str, Any]], summary: dict[str, Any], steady: int,
                     planned_world: int) -> dict[str, Any]:
    """Loss, accuracy, each rank's own figures and the sanity checks: whether the run trained as planned."""
    rank0 = ranks[0]
    curve = rank0["loss"]
    finite = all(x == x and abs(x) != float("inf") for x in curve)
    acc = rank0["train_acc"] or []
    acc_window = acc[-max(len(acc) // 4, 1):]
    test = summary.get("test")
    return {
        "loss": {"first": curve[0], "last": curve[-1], "curve": curve},
        "train_acc": _mean(acc_window) if acc_window else None,
        "train_acc_reason": None if acc_window else rank0.get("train_acc_reason"),
        "test_acc": test["accuracy"] if test else None,
        "ranks": [{"rank": r["rank"], "host": r["host"], "device": r["device"], "images_per_s": r["images_per_s"],
                   "step_s_mean": _mean(r["step_s"][:steady]), "peak_memory_bytes": r["peak_memory_bytes"]}
                  for r in ranks],
        # What rank 0's engine object ran with (bench.worker.engines.settings), beside the ds_config asked for.
        "engine_settings": rank0.get("engine_settings"),
        "sanity": {"loss_finite": finite, "loss_fell": loss_fell(curve),
                   "world_size_as_planned": summary["world_size"] == planned_world},
    }


def share_figures(comm: dict[str, Any], step_mean: float) -> dict[str, Any]:
    """The communication figures and their share of a step (null, with the reason, where not timed)."""
    if comm["seconds_per_step"] is not None:
        return {"comm": comm, "comm_share": metrics.comm_share(comm["seconds_per_step"], step_mean),
                "comm_share_reason": None}
    return {"comm": comm, "comm_share": None, "comm_share_reason": comm.get("reason") or comm["timing"]}


def per_rank_flops(figures: dict[str, Any], pipeline_stages: int, tensor_parallel: int) -> None:
    """Each rank's TFLOP/s and MFU, for the share of the model it computes, into its entry of figures["ranks"]."""
    if pipeline_stages > 1:
        # A stage computes only its layers: a rank's images/s times the model's FLOPs would overstate it.
        figures["tflops_per_rank"] = figures["mfu_per_rank"] = [None] * len(figures["ranks"])
    if tensor_parallel > 1:
        # A TP rank computes about 1/T of its replica's FLOPs (the split layers; the rest is small).
        for key in ("tflops_per_rank", "mfu_per_rank"):
            figures[key] = [x / tensor_parallel if x is not None else None for x in figures.get(key, [])]
    for entry, tf, u in zip(figures["ranks"], figures.get("tflops_per_rank", []), figures.get("mfu_per_rank", [])):
        entry["tflops"], entry["mfu"] = tf, u
