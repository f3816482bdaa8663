"""FSDP2 against DDP and DeepSpeed ZeRO-3 on the same 2 ranks: whole `bench run`s, interleaved.

    .venv/bin/python benchmarks/engines.py                      # 4 rounds of 3 runs, ~8 min on 2 cores
    .venv/bin/python benchmarks/engines.py --rounds 2 --arms ddp,fsdp2

Each arm is a real `bench run --gpus 2` (the code a user runs: its engine,
its loop, its timers), one run per arm per round, in alternating order
(A B C, C B A, ...), so a drift of the machine's load falls on every arm
alike. The figure of a run is its record's `images_per_s`: steady steps
only, so process start-up and the warm-up steps are not in it. The ratio
printed is the median of the per-round ratios against ddp. Beside it, each
arm's bytes sent per step and model states per rank from the same records.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

ARMS = {
    "ddp": ["--engine", "ddp"],
    "fsdp2": ["--engine", "fsdp2"],
    "zero3": ["--zero-stage", "3"],
    "fsdp2-keep": ["--engine", "fsdp2", "--no-reshard-after-forward"],
    "zero2": ["--zero-stage", "2"],
}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit-tiny-p4-32")
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--timing-warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--arms", default="ddp,fsdp2,zero3")
    return _common.parse_smoke(p, None, dict(model="vit-micro-p4-32", micro_batch=4, steps=2, timing_warmup=1,
                                             rounds=1, arms=",".join(ARMS)))


def main() -> int:
    args = parse()
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        print(f"engines.py: --arms: unknown {unknown[0]!r} (known: {', '.join(ARMS)})", file=sys.stderr)
        return 2
    print(_common.machine(), flush=True)
    out = tempfile.mkdtemp(prefix="vitbench-engines-")
    run = ["--gpus", "2", "--dataset", "synthetic", "--synthetic-size", "2048", "--model", args.model,
           "--micro-batch", str(args.micro_batch), "--steps", str(args.steps), "--timing-warmup",
           str(args.timing_warmup), "--no-eval", "--out", out]
    print(f"# {args.model}, micro batch {args.micro_batch}, {args.steps} steps ({args.timing_warmup} warm-up) "
          f"per run, 2 CPU ranks, arms {', '.join(arms)}", flush=True)
    kept, last = _common.interleave_runs({a: [*run, *ARMS[a]] for a in arms}, args.rounds)
    base = "ddp" if "ddp" in arms else arms[0]
    print(f"\n{'arm':12} {'median img/s':>12} {'x ' + base:>8} {'sent/step':>11} {'states/rank':>12}")
    for a in arms:
        fig = last[a]["figures"]
        ratio = _common.paired_ratio(kept[a], kept[base])
        print(f"{a:12} {_common.median(kept[a]):12.2f} {ratio:8.3f} {fig['comm']['bytes_per_step'] / 1e6:9.2f} MB"
              f" {fig['model_states_bytes'] / 1e6:9.2f} MB")
    _common.print_rounds(kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())
