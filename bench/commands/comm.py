"""`bench comm`: collective bandwidth between the ranks a run would use, with a correctness count.

    bench comm                                        # 2 local CPU ranks, gloo, all_reduce 1K..4M
    bench comm --op all_gather --sizes 4K:64M --gpus 8 --json
    bench comm --hostfile hostfiles/vector --sizes 1M,64M,256M --iters 20

Exit: 0 ok, 1 a rank failed or a value was wrong, 2 bad input. The job is
bench.jobs.comm; the figures bench.analysis.comm_figures (docs/metrics.md).
"""

from __future__ import annotations

import json

from bench.cluster.hostfile import HostSelection
from bench.commands.common import add_json_flag, add_metrics_flag, check_metrics_file, write_metrics
from bench.core.errors import EXIT_FAILED
from bench.core.options import add_options, from_args
from bench.jobs.comm import CommConfig, run

HELP = "measure collective bandwidth (algbw, busbw) and correctness between the ranks, as nccl-tests does"


def add_arguments(p) -> None:
    add_options(p, CommConfig)
    add_options(p, HostSelection, skip=("num_gpus",))
    add_json_flag(p, "the record")
    add_metrics_flag(p)


def main(args) -> int:
    check_metrics_file(args.metrics_file)
    rec = run(from_args(CommConfig, args), from_args(HostSelection, args), quiet=args.json)
    write_metrics(args.metrics_file, rec)
    if args.json:
        print(json.dumps(rec))
    else:
        from bench.render.comm import render
        render(rec)
    return 0 if rec["status"] == "ok" else EXIT_FAILED
