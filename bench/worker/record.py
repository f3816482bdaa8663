"""What a training rank reports: its own record (ranks/rank<R>.json) and, on rank 0, the run's summary's parts.

    rec = rank_record(cfg, rank, local_rank, world, mem, times, steps_per_epoch)
    est = deepspeed_estimate(cfg, plan, params, largest_layer)
    versions(device)

Split from bench.worker.main so that main reads as the phases of a rank
(set up, data, engine, train, evaluate, report) and this file as the one
place the figures of a rank's record are put together.
"""

from __future__ import annotations

import os
import socket
import sys

from bench.core import provenance


def rank_record(cfg, rank, local_rank, world, mem, times, steps_per_epoch) -> dict:
    from bench.worker.bootstrap import THREADS
    from bench.worker.loop import epoch_walls, steady_window

    warm = min(cfg.timing_warmup, len(times.step) - 1)
    steady = slice(warm, None)
    step_s, skipped = steady_window(times, warm)
    images = cfg.micro_batch * cfg.grad_accum * len(step_s)
    return {
        "rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "pid": os.getpid(),
        "status": "ok",
        "images_per_s": images / sum(step_s),
        "warmup_steps": warm, "warmup_s": sum(times.step[:warm]),
        # Steps whose update fp16's loss scaler skipped train nothing: out of step_s, images/s and MFU.
        "steady_steps": len(step_s), "skipped_steps": len(skipped), "skipped_at": skipped,
        "steady_from": times.steady_from,
        "step_s": step_s,
        "step_timing": times.timing,
        "epoch_wall_s": epoch_walls(times, steps_per_epoch),
        "parts_s": {k: sum(getattr(times, k)[steady]) / len(times.step[steady])
                    for k in ("data", "forward", "backward", "optimizer")} if times.forward else None,
        "loss": times.loss, "train_acc": times.acc or None,
        **({} if times.forward else pipeline_reasons()),
        **mem,
        "threads": dict(THREADS),
        # What this rank was given (the launching shell's environment may say otherwise): NCCL_*, GLOO_*, ...
        "env": provenance.allowed_env(),
    }


def pipeline_reasons() -> dict[str, str]:
    """Why a pipeline rank's record has no parts and no training accuracy (bench.worker.pipeline)."""
    from bench.worker.pipeline import ACC_REASON, PARTS_REASON
    return {"parts_reason": PARTS_REASON, "train_acc_reason": ACC_REASON}


def deepspeed_estimate(cfg, plan: dict, params: int, largest_layer: int) -> dict:
    """DeepSpeed's own model-state estimate per accelerator, for the ZeRO stages it ships an estimator for.

    estimate_zero2/3_model_states_mem_needs assume mixed-precision training
    on GPUs (2-byte parameters, fp32 master, gradients and Adam states); the
    record says so beside the figure.
    """
    if cfg.engine != "deepspeed" or cfg.zero_stage < 2:
        return {"bytes_per_rank": None, "reason": "DeepSpeed ships model-state estimators for its ZeRO-2 and ZeRO-3 "
                                                  "only"}
    if cfg.tensor_parallel > 1:
        return {"bytes_per_rank": None, "reason": "DeepSpeed's ZeRO estimators know no tensor parallelism"}
    counts = [len(s) for s in plan["resources"].values()]
    gpus_per_node, nodes = max(counts), len(counts)
    if cfg.zero_stage == 2:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        cpu, gpu = estimate_zero2_model_states_mem_needs(params, gpus_per_node, nodes, cpu_offload=bool(cfg.offload))
        call = "estimate_zero2_model_states_mem_needs"
    else:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(params, largest_layer, gpus_per_node, nodes,
                                                            cpu_offload=bool(cfg.offload),
                                                            cpu_offload_params=cfg.offload == "nvme")
        call = "estimate_zero3_model_states_mem_needs"
    return {"bytes_per_rank": int(gpu), "cpu_bytes_per_node": int(cpu), "how": f"deepspeed {call}", "reason":
            "DeepSpeed's estimate assumes mixed precision (2-byte weights, fp32 master, grads and Adam states)"}


def train_flops(model, img_size: int) -> float | None:
    """Analytic training FLOPs per image for ViTs (None for other models)."""
    from bench.core import flops

    try:
        return float(flops.timm_vit_train_flops(model, img_size))
    except (AttributeError, TypeError, ValueError):
        return None


def versions(device) -> dict:
    import deepspeed
    import timm
    import torch

    nccl = None
    if device.type == "cuda":
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - NCCL may be absent from a CPU build
            nccl = None
    return {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "timm": timm.__version__,
            "cuda": torch.version.cuda, "nccl": nccl, "python": sys.version.split()[0]}
