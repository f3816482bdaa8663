"""`bench run`: train a timm ViT with DeepSpeed on this node or a hostfile's nodes, and record the figures.

    bench --gpus 2 --dataset synthetic --steps 30 --json
    bench run --hostfile hostfiles/tesla --launcher openmpi --dataset cifar10 --epochs 1
    bench run --dry-run --zero-stage 2 --precision bf16

Exit: 0 ok, 1 the run failed (the failing rank is named, with its last log
lines), 2 bad input, 130 Ctrl-C. The job itself is bench.jobs.train.
"""

from __future__ import annotations

import json
import os
import sys

from bench.cluster.hostfile import HostSelection
from bench.commands.common import (add_dry_run_flag, add_json_flag, add_metrics_flag, add_training_options,
                                   check_metrics_file, write_metrics)
from bench.commands.profile import recorded
from bench.core.config import RunConfig
from bench.core.errors import EXIT_FAILED, EXIT_INTERRUPTED
from bench.core.options import add_options, from_args
from bench.jobs.train import Mode, dry_run, run

HELP = "train a timm ViT with DeepSpeed on this node or a hostfile's nodes, and record the figures"


def add_arguments(p) -> None:
    add_training_options(p)
    add_options(p, HostSelection, skip=("num_gpus",))
    add_dry_run_flag(p, "print the resolved config, the DeepSpeed JSON and the launch command; launch nothing")
    add_json_flag(p, "the result record")
    add_metrics_flag(p)


def main(args) -> int:
    from bench.render.progress import StepBar

    cfg, hosts = from_args(RunConfig, args), from_args(HostSelection, args)
    check_metrics_file(args.metrics_file)
    if args.dry_run:
        print(json.dumps(dry_run(cfg, hosts), indent=2))
        return 0
    bar = StepBar(enabled=not args.json)
    try:
        rec = run(cfg, hosts, Mode(quiet=args.json, on_progress=bar.update, extra={"sources": recorded(args)}))
    finally:
        bar.close()
    write_metrics(args.metrics_file, rec)
    if args.json:
        print(json.dumps(rec))
    else:
        from rich.console import Console

        from bench.render.run import print_run
        print_run(rec, Console(stderr=False))
        print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)
    if rec["status"] in ("failed", "oom") and rec.get("error"):
        # One line a person or a script greps, with --json too: the cause first (for a hang: the odd ranks).
        print(f"bench: {rec['status']}: {rec['error'].get('reason') or rec['error'].get('where', '')}", file=sys.stderr)
    return {"ok": 0, "interrupted": EXIT_INTERRUPTED}.get(rec["status"], EXIT_FAILED)
