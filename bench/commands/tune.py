"""`bench tune`: which ZeRO stage, micro batch, accumulation and GPU count to use here, with the evidence.

    bench tune --gpus 2 --dataset synthetic --model vit-micro-p4-32 --budget 12
    bench tune --hostfile hostfiles/vector --launcher openmpi --global-batch 512 --budget-minutes 30
    bench tune --strategies zero1,zero2,zero2+offload --micro-batches 16,32,64,128 --json

The hosts, launcher and container options are bench run's. A tune is one
folder, OUT/<name>/ (default OUT/tune): sweep.json and results.jsonl as a
sweep writes them (every trial a point record), runs/, and tune.json (every
trial, the pruned candidates with their reasons, the ranking, the verdict,
the advice and the command; bench/schemas/tune.schema.json). The same
command again resumes: recorded trials are not run again. Ctrl-C keeps every
finished trial, writes tune.json and exits 130.

Exit: 0 done or the budget spent with a recommendation; 1 nothing ran ok;
2 bad input; 130 interrupted. The search is bench.experiments.tune.
"""

from __future__ import annotations

import dataclasses
import json
import os

from bench.cluster.hostfile import HostSelection
from bench.commands.common import add_dry_run_flag, add_json_flag, add_training_options
from bench.core import results
from bench.core.config import RunConfig
from bench.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, BadInput
from bench.core.options import add_options, from_args
from bench.experiments.pool import Pool
from bench.experiments.tune_search import Space, TuneOptions
from bench.jobs import gate
from bench.jobs.plan import plan_resources

HELP = "search ZeRO stage, micro batch, accumulation and GPU count for these hosts; the same command resumes"


def add_arguments(p) -> None:
    add_training_options(p, skip=("micro_batch", "grad_accum", "zero_stage", "offload", "engine", "steps", "epochs"))
    add_options(p, HostSelection, skip=("num_gpus",))
    add_options(p, TuneOptions)
    g = p.add_argument_group("output")
    g.add_argument("--name", default=None, help="tune folder name under --out (default: tune)")
    add_dry_run_flag(g, "print the search space (strategies, GPU counts, micro batches, what is ruled out and why) "
                        "as planned from this node; reach no node, launch nothing")
    add_json_flag(g, "tune.json")


def main(args) -> int:
    from bench.analysis.tune import validate_doc
    from bench.experiments import tune, tune_doc
    from bench.jobs.train import run
    from bench.render.tune import TuneProgress

    cfg, hosts, opts = from_args(RunConfig, args), from_args(HostSelection, args), from_args(TuneOptions, args)
    name = args.name or "tune"
    if "/" in name or name in (".", ".."):
        raise BadInput(f"--name: {name!r} is not a folder name")
    placement = plan_resources(cfg, hosts)
    pool = Pool(resources=placement.resources, hostfile=bool(hosts.hostfile), device=placement.device)
    tune_dir = os.path.abspath(os.path.join(cfg.out, name))
    space = Space.build(cfg, opts, pool)    # bad options fail here, before any host is reached
    if args.dry_run:  # the space as this node plans it; the nodes' inventory (GPU memory, device) refines it
        print(json.dumps({"tune_dir": tune_dir, "resources": pool.resources, "device": pool.device,
                          "options": dataclasses.asdict(opts), "space": dataclasses.asdict(space)}, indent=2))
        return 0
    # The inventory once, for every trial: the smallest GPU's memory bounds the search.
    inventory, verdict = gate.inspect_cluster(cfg, placement, quiet=args.json, run_root=cfg.out)
    device = gate.device_of(cfg, placement, verdict)
    pool = Pool(resources=pool.resources, hostfile=pool.hostfile, device=device)
    mib = verdict.get("min_memory_mib") if device == "cuda" else None

    def run_one(config, trial_hosts, mode):  # every trial without probing the hosts again
        return run(config, trial_hosts, dataclasses.replace(mode, inspected=(inventory, verdict)))

    tuner = tune.Tuner(cfg, hosts, pool, opts, tune_dir, run_one=run_one,
                       view=TuneProgress(opts.budget_runs, quiet=False), capacity=int(mib) << 20 if mib else None)
    status, why = tuner.tune()
    doc = tune_doc.build(tuner, status, why, hosts)
    validate_doc(doc)
    results.write_json_atomic(os.path.join(tune_dir, "tune.json"), doc)
    if args.json:
        print(json.dumps(doc))
    else:
        from rich.console import Console

        from bench.render.tune import print_tune
        con = Console()
        print_tune(doc, con if con.is_terminal else Console(width=140))
        print(f"tune.json: {os.path.join(tune_dir, 'tune.json')}")
    if status == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if doc["ranking"] else EXIT_FAILED
