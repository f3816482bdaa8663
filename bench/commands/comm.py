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
from bench.commands.common import add_dry_run_flag, add_json_flag, add_metrics_flag, check_metrics_file, write_metrics
from bench.core.errors import EXIT_FAILED
from bench.core.options import add_options, from_args
from bench.jobs.comm import CommConfig, run

HELP = "measure collective bandwidth (algbw, busbw) and correctness between the ranks, as nccl-tests does"


def add_arguments(p) -> None:
    add_options(p, CommConfig)
    add_options(p, HostSelection, skip=("num_gpus",))
    add_json_flag(p, "the record")
    add_metrics_flag(p)
    add_dry_run_flag(p, "print the resolved config, the ranks, the device and the sizes; reach no node, launch "
                        "nothing")


def main(args) -> int:
    check_metrics_file(args.metrics_file)
    cfg, hosts = from_args(CommConfig, args), from_args(HostSelection, args)
    if args.dry_run:
        print(json.dumps(_plan(cfg, hosts), indent=2))
        return 0
    rec = run(cfg, hosts, quiet=args.json)
    write_metrics(args.metrics_file, rec)
    if args.json:
        print(json.dumps(rec))
    else:
        from bench.render.comm import render
        render(rec)
    return 0 if rec["status"] == "ok" else EXIT_FAILED


def _plan(cfg: CommConfig, hosts: HostSelection) -> dict:
    """What bench comm would measure, planned as its run plans it (bench.jobs.plan), before any node is reached:
    the device is this node's guess; the nodes' inventory decides it in the run (and the GPU sizes' cap)."""
    from bench.jobs.plan import plan_resources

    placement = plan_resources(cfg, hosts)
    return {"config": cfg.to_dict(), "resources": placement.resources, "launcher": placement.launcher,
            "world_size": placement.world, "device": placement.device, "sizes": cfg.size_list(placement.device)}
