"""The memory suite: one point per training strategy, and (--find-max-batch) the largest micro batch each fits.

    points = plan(base, opts, pool, make_point)          # memory/<strategy>/gpus=N, in STRATEGIES order
    follow_ups(point, latest, make_point)                # the next micro batch to try, from the records so far

Strategies (every one at the base config's model, batch and precision):
  ddp             PyTorch DDP: every rank holds everything (fp32 only)
  zero0..zero3    DeepSpeed ZeRO: optimizer states, + gradients, + parameters partitioned
  zero2+offload   ZeRO-2 with the optimizer states in CPU memory (ZeRO-Offload)
  zero3+offload   ZeRO-3 likewise
  zero3+nvme      ZeRO-Infinity: optimizer states and parameters swapped to --nvme-path (only when it is given)
  fsdp2           FSDP2, resharded after forward (ZeRO-3-like)
  fsdp2-keep      FSDP2 keeping gathered parameters from forward to backward (ZeRO-2-like)
  pipeline        DeepSpeed pipeline stages, one per rank of the point (ZeRO-0)
  fsdp2+tp2/tp4   tensor parallelism T = 2, 4 (DTensor) with FSDP2 over the D = ranks / T replicas, where
                  T divides the ranks and the model's heads and MLP width; zero<k>+tp<T> (DeepSpeed's
                  AutoTP under ZeRO-k) on request (--strategies)

--find-max-batch: per strategy, the micro batch doubles from the base's
until a run ends `oom` (or --max-micro-batch), then bisects between the
largest that fit and the smallest that did not, until they are within an
eighth of each other. Each try is a point of its own (an OOM is a recorded
result), and the next try is computed from the records alone, so a resumed
sweep continues the search where it stopped. On CPUs an OOM needs a memory
limit (a container's, a Slurm job's, a memory cgroup); without one the
search stops at --max-micro-batch.
"""

from __future__ import annotations

from typing import Any, Callable

from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.core.parallel import model_divides, tensor_parallel_of

STRATEGIES: dict[str, dict[str, Any]] = {
    "ddp": {"engine": "ddp"},
    "zero0": {"zero_stage": 0},
    "zero1": {"zero_stage": 1},
    "zero2": {"zero_stage": 2},
    "zero3": {"zero_stage": 3},
    "zero2+offload": {"zero_stage": 2, "offload": "cpu"},
    "zero3+offload": {"zero_stage": 3, "offload": "cpu"},
    "zero3+nvme": {"zero_stage": 3, "offload": "nvme"},
    "fsdp2": {"engine": "fsdp2", "reshard_after_forward": True},
    "fsdp2-keep": {"engine": "fsdp2", "reshard_after_forward": False},
    "pipeline": {},  # pipeline_stages: the point's rank count
}
_NEUTRAL = {"engine": "deepspeed", "zero_stage": 0, "offload": None, "pipeline_stages": 1,
            "reshard_after_forward": True, "tensor_parallel": 1}
TP_DEFAULT = (2, 4)  # the T the suite tries by default (where they divide)

CLOSE_ENOUGH = 8  # stop bisecting once the gap is at most an eighth of the largest batch that fit


def default_strategies(base: RunConfig, ranks: int) -> list[str]:
    """Every strategy the base config can run: ddp only at fp32, zero3+nvme only with --nvme-path, pipeline at >= 2."""
    out = []
    for name in STRATEGIES:
        if name == "ddp" and base.precision != "fp32":
            continue
        if name == "fsdp2" or name == "fsdp2-keep":
            if base.precision not in ("fp32", "bf16"):
                continue
        if name == "zero3+nvme" and not base.nvme_path:
            continue
        if name == "pipeline" and ranks < 2:
            continue
        out.append(name)
    if base.precision in ("fp32", "bf16"):
        out += [f"fsdp2+tp{t}" for t in TP_DEFAULT if 1 < t <= ranks and ranks % t == 0
                and model_divides(base.model, base.img_size, t)]
    return out


def config_of(base: RunConfig, strategy: str, ranks: int) -> RunConfig:
    """The base config running `strategy` on `ranks` ranks; BadInput (naming the strategy) where it cannot."""
    tp = tensor_parallel_of(strategy)
    if strategy not in STRATEGIES and tp is None:
        raise BadInput(f"--strategies: unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)}, and "
                       "fsdp2+tp<T>, zero<k>+tp<T>)")
    change = {**_NEUTRAL, **STRATEGIES[tp[0] if tp else strategy]}
    if tp:
        change["tensor_parallel"] = tp[1]
        if ranks % tp[1]:
            raise BadInput(f"--strategies: {strategy} needs points whose ranks T = {tp[1]} divides (--gpu-counts)")
    if strategy == "pipeline":
        if ranks < 2:
            raise BadInput("--strategies: pipeline needs points of >= 2 ranks (--gpu-counts)")
        change["pipeline_stages"] = ranks
    if strategy == "zero3+nvme" and not base.nvme_path:
        raise BadInput("--strategies: zero3+nvme needs --nvme-path DIR")
    try:
        return base.replace(**change)
    except BadInput as e:
        raise BadInput(f"--strategies: {strategy}: {e}") from None


def plan(base: RunConfig, opts, pool, make_point: Callable, gpu_counts: list[int]) -> list:
    points = []
    for n in gpu_counts:
        names = list(opts.values) if opts.values else default_strategies(base, n)
        for s in names:
            cfg = config_of(base, s, n)
            points.append(make_point(f"memory/{s}/gpus={n}", cfg, n,
                                     {"strategy": s, "micro_batch": cfg.micro_batch}))
    return points


def next_micro_batch(tried: dict[int, str], cap: int) -> int | None:
    """The next micro batch to try from {micro batch: status} so far, or None when the search is over.

    Doubling until the first `oom` (or the cap), then bisection between the largest that fit and
    the smallest that did not, until the gap is at most 1/CLOSE_ENOUGH of the largest fit. A status
    other than ok and oom (a failed run) ends the search: a failure is not a memory wall.
    """
    if any(s not in ("ok", "oom") for s in tried.values()):
        return None
    fits = [b for b, s in tried.items() if s == "ok"]
    ooms = [b for b, s in tried.items() if s == "oom"]
    lo = max(fits, default=None)
    hi = min((b for b in ooms if lo is None or b > lo), default=None)
    if lo is None:
        nxt = (hi or 0) // 2  # not even the base fits: halve down to 1
        return nxt if nxt >= 1 and nxt not in tried else None
    if hi is None:
        nxt = lo * 2
        return nxt if nxt <= cap and nxt not in tried else None
    if hi - lo <= max(1, lo // CLOSE_ENOUGH):
        return None
    nxt = (lo + hi) // 2
    return nxt if nxt not in tried else None


def max_batch(tried: dict[int, str]) -> dict[str, Any]:
    """{"fits": largest ok micro batch, "oom": smallest oom above it} (None where not seen)."""
    fits = max((b for b, s in tried.items() if s == "ok"), default=None)
    oom = min((b for b, s in tried.items() if s == "oom" and (fits is None or b > fits)), default=None)
    return {"fits": fits, "oom": oom}


def follow_ups(point, latest: dict[str, dict[str, Any]], make_point: Callable, cap: int) -> list:
    """The next try of point's strategy (a point of its own), computed from the records in `latest`."""
    labels = point.labels
    if point.suite != "memory" or "strategy" not in labels:
        return []
    base_id = labels.get("search_of", point.id)
    base = labels.get("base_micro_batch", point.config.micro_batch)
    tried = {}
    for pid, rec in latest.items():
        if pid == base_id:
            tried[base] = rec.get("status")
        elif pid.startswith(base_id + "/mb="):
            tried[int(pid.rsplit("=", 1)[1])] = rec.get("status")
    if point.id not in latest:
        return []  # not run (an interrupted sweep): nothing to follow yet
    mb = next_micro_batch(tried, cap)
    if mb is None:
        return []
    cfg = point.config.replace(micro_batch=mb)
    return [make_point(f"{base_id}/mb={mb}", cfg, point.gpus,
                       {**labels, "micro_batch": mb, "search_of": base_id, "base_micro_batch": base})]
