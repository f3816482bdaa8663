"""Tensor parallelism against FSDP2 and pipeline stages at equal ranks and global batch: whole `bench run`s, interleaved.

    .venv/bin/python benchmarks/parallel.py                         # 3 rounds of 4 runs on 2 ranks, ~8 min on 2 cores
    .venv/bin/python benchmarks/parallel.py --rounds 2 --arms fsdp2,tp2

Every arm trains the same model on the same ranks with the same global batch
(--global-batch images per optimizer step), split another way (T x P x D):

    fsdp2      1 x 1 x R    FSDP2 over all R ranks, micro batch G / R
    tp2        2 x 1 x R/2  DTensor tensor parallelism T = 2, FSDP2 over the R/2 replicas, micro G / (R/2)
    autotp2    2 x 1 x R/2  DeepSpeed's AutoTP T = 2 under ZeRO-1, the same micro batch
    pipeline   1 x R x 1    DeepSpeed pipeline stages, one per rank, G in --pipeline-micro micro batches

Each arm is a real `bench run --gpus R`, one per arm per round, in
alternating order (A B C D, D C B A, ...), so a drift of the machine's load
falls on every arm alike. The figure of a run is its record's images_per_s
(steady steps only); the ratio printed is the median of the per-round ratios
against fsdp2. Beside it, from the same records: bytes sent per step (TP's
own beside Megatron's figure), model states per rank and peak memory. The
machine line and the load average at every round are printed: two shared
cores make wall-clock figures move with other work.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def arms(ranks: int, global_batch: int, pipeline_micro: int) -> dict[str, list[str]]:
    """Each arm's split as bench run options, all at `ranks` ranks and `global_batch` images per step."""
    dp, half = global_batch // ranks, global_batch // (ranks // 2)
    return {
        "fsdp2": ["--engine", "fsdp2", "--micro-batch", str(dp)],
        "tp2": ["--engine", "fsdp2", "--tensor-parallel", "2", "--micro-batch", str(half)],
        "autotp2": ["--tensor-parallel", "2", "--zero-stage", "1", "--micro-batch", str(half)],
        "pipeline": ["--pipeline-stages", str(ranks), "--micro-batch", str(global_batch // pipeline_micro),
                     "--grad-accum", str(pipeline_micro)],
    }


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit-small-p4-32",
                   help="6 heads and an MLP of 1536: T = 2 divides both (--smoke: vit-micro-h4-p4-32, 4 and 384)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--pipeline-micro", type=int, default=2, help="micro batches per step of the pipeline arm")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--timing-warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--arms", default="fsdp2,tp2,autotp2,pipeline")
    return _common.parse_smoke(p, None, dict(model="vit-micro-h4-p4-32", global_batch=8, steps=2, timing_warmup=1,
                                             rounds=1))


def main() -> int:
    args = parse()
    table = arms(args.ranks, args.global_batch, args.pipeline_micro)
    names = args.arms.split(",")
    unknown = [a for a in names if a not in table]
    if unknown:
        print(f"parallel.py: --arms: unknown {unknown[0]!r} (known: {', '.join(table)})", file=sys.stderr)
        return 2
    if args.ranks % 2 or args.global_batch % args.ranks or args.global_batch % args.pipeline_micro:
        print("parallel.py: --ranks must be even and divide --global-batch, as --pipeline-micro must", file=sys.stderr)
        return 2
    print(_common.machine(), flush=True)
    out = tempfile.mkdtemp(prefix="vitbench-parallel-")
    run = ["--gpus", str(args.ranks), "--dataset", "synthetic", "--synthetic-size", "4096", "--model", args.model,
           "--steps", str(args.steps), "--timing-warmup", str(args.timing_warmup), "--no-eval", "--out", out]
    print(f"# {args.model}, {args.ranks} CPU ranks, global batch {args.global_batch}, {args.steps} steps "
          f"({args.timing_warmup} warm-up) per run, arms {', '.join(names)}", flush=True)
    kept, last = _common.interleave_runs({a: [*run, *table[a]] for a in names}, args.rounds)
    base = "fsdp2" if "fsdp2" in names else names[0]
    print(f"\n{'arm':9} {'T x P x D':>9} {'micro x m':>9} {'img/s':>8} {'x ' + base:>8} {'sent/step':>11} "
          f"{'TP/step':>10} {'x Megatron':>10} {'states/rank':>12} {'peak RSS':>9}")
    for a in names:
        rec = last[a]
        fig, cfg = rec["figures"], rec["config"]
        tp = fig["comm"].get("tensor_parallel") or {}
        print(f"{a:9} {rec['plan']['parallel']['split']:>9} {cfg['micro_batch']:>4} x {cfg['grad_accum']:<2} "
              f"{_common.median(kept[a]):8.2f} {_common.paired_ratio(kept[a], kept[base]):8.3f} "
              f"{fig['comm']['bytes_per_step'] / 1e6:8.2f} MB "
              + (f"{tp['bytes_per_step'] / 1e6:7.2f} MB {tp['measured_over_analytic']:10.4f}" if tp else
                 f"{'-':>10} {'-':>10}")
              + f" {fig['model_states_bytes'] / 1e6:9.2f} MB {max(fig['peak_memory_bytes']) / 2**20:6.0f} MiB")
    _common.print_rounds(kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())
