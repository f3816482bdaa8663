"""The ranks' summary.json -> the figures of a run record (every formula from metrics)."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench import metrics


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def loss_fell(curve: list[float]) -> bool:
    """Mean loss of the last quarter of the steps below that of the first quarter."""
    if len(curve) < 4:
        return len(curve) >= 2 and curve[-1] < curve[0]
    q = max(len(curve) // 4, 1)
    return _mean(curve[-q:]) < _mean(curve[:q])


def from_summary(summary: dict[str, Any], *, micro_batch: int, grad_accum: int, planned_world: int,
                 flops_per_image: float | None = None, peak_flops: float | None = None) -> dict[str, Any]:
    ranks = sorted(summary["ranks"], key=lambda r: r["rank"])
    world = summary["world_size"]
    per_step_images = micro_batch * grad_accum * world
    steady = min(r["steady_steps"] for r in ranks)
    # Data-parallel ranks step together: the cluster's pace is its slowest rank's.
    slowest_time = max(sum(r["step_s"][:steady]) for r in ranks)
    images_per_s = metrics.images_per_s(per_step_images * steady, slowest_time)
    rank0 = ranks[0]
    step_times = [t for r in ranks for t in r["step_s"][:steady]]
    step = metrics.summary(step_times)
    parts = {k: _mean([r["parts_s"][k] for r in ranks]) for k in ranks[0]["parts_s"]}
    step_mean = _mean([_mean(r["step_s"][:steady]) for r in ranks])
    curve = rank0["loss"]
    finite = all(x == x and abs(x) != float("inf") for x in curve)
    acc_window = rank0["train_acc"][-max(len(rank0["train_acc"]) // 4, 1):]
    test = summary.get("test")
    figures: dict[str, Any] = {
        "world_size": world,
        "global_batch": per_step_images,
        "images_per_s": images_per_s,
        "images_per_s_per_rank": [r["images_per_s"] for r in ranks],
        "step_s": dataclasses.asdict(step),
        "parts_s": parts,
        "comm_share": metrics.comm_share(parts.get("allreduce", 0.0), step_mean),
        "data_share": parts.get("data", 0.0) / step_mean,
        "steps_per_epoch": summary["steps_per_epoch"],
        "epoch_s": step_mean * summary["steps_per_epoch"],
        "epoch_s_estimated": summary["total_steps"] < summary["steps_per_epoch"],
        "total_steps": summary["total_steps"],
        "warmup": {"steps": rank0["warmup_steps"], "seconds": rank0["warmup_s"]},
        "peak_memory_bytes": [r["peak_memory_bytes"] for r in ranks],
        "memory_kind": rank0["memory_kind"],
        "loss": {"first": curve[0], "last": curve[-1], "curve": curve},
        "train_acc": _mean(acc_window),
        "test_acc": test["accuracy"] if test else None,
        "ranks": [{"rank": r["rank"], "host": r["host"], "device": r["device"], "images_per_s": r["images_per_s"],
                   "step_s_mean": _mean(r["step_s"][:steady]), "peak_memory_bytes": r["peak_memory_bytes"]}
                  for r in ranks],
        "sanity": {"loss_finite": finite, "loss_fell": loss_fell(curve),
                   "world_size_as_planned": world == planned_world},
    }
    if flops_per_image:
        achieved = flops_per_image * images_per_s
        figures["tflops"] = achieved / 1e12
        figures["flops_per_image"] = flops_per_image
        figures["mfu"] = metrics.mfu(achieved / world, peak_flops) if peak_flops else None
    return figures
