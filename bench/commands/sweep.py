"""`bench sweep SUITE`: run a suite's points one after another, resumably.

    bench sweep batch --gpus 2 --dataset synthetic --micro-batches 16,32,64 --steps 30
    bench sweep strong --hostfile hostfiles/vector --micro-batch 64 --epochs 1
    bench sweep paper --dry-run                 # the study's runs, listed, nothing launched
    bench sweep zero --gpus 2 --precisions bf16 --json
    bench sweep memory --gpus 2 --model vit-large-p4-32 --micro-batch 2 --steps 8 --find-max-batch

A sweep is one folder, OUT/<name>/ (name: --name, default the suite):
  sweep.json     the suite, the base config, the options and every planned point
  results.jsonl  one record (kind "point") per finished point, appended as it ends
  runs/<run-id>/ each point's run directory, as `bench run` writes it

Run the same command again and it resumes (bench.experiments.sweep): a point whose latest record is
ok or oom is skipped (an OOM is a result: it will not fit next time either);
a failed point is run again (hosts go down and come back; the old record
stays, the report takes the latest). Ctrl-C keeps every finished point and
exits 130. A point whose id is planned again with another config (other
--steps, say) is refused: give --name or --out for a new sweep.

Exit: 0 every point ok or oom; 1 a point failed; 2 bad input; 130 interrupted.
The engine is bench.experiments.sweep; the suites bench.experiments.suites.
"""

from __future__ import annotations

import os

from bench.cluster.hostfile import HostSelection
from bench.commands.common import add_dry_run_flag, add_json_flag, add_training_options
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.core.options import add_options, from_args
from bench.experiments import suites, sweep
from bench.jobs import gate
from bench.jobs.plan import Placement, plan_resources

HELP = "run a suite of points (" + ", ".join(suites.SUITES) + "); the same command again resumes"


def add_arguments(p) -> None:
    p.add_argument("suite", choices=suites.SUITES, metavar="SUITE", help="one of: " + ", ".join(suites.SUITES))
    add_training_options(p)
    add_options(p, HostSelection, skip=("num_gpus",))
    add_options(p, suites.SuiteOptions)
    g = p.add_argument_group("output")
    g.add_argument("--name", default=None, help="sweep folder name under --out (default: the suite)")
    add_dry_run_flag(g, "list the points and launch nothing")
    add_json_flag(g)


def make_pool(placement: Placement, hosts: HostSelection) -> suites.Pool:
    """The resources the host options select, exactly as `bench run` resolves them (plan_resources)."""
    return suites.Pool(resources=placement.resources, hostfile=bool(hosts.hostfile), device=placement.device)


def main(args) -> int:
    from bench.jobs.train import run
    from bench.render.progress import SweepProgress, print_plan

    cfg, hosts = from_args(RunConfig, args), from_args(HostSelection, args)
    opts = from_args(suites.SuiteOptions, args).for_suite(args.suite)
    placement = plan_resources(cfg, hosts)
    pool = make_pool(placement, hosts)
    name = args.name or args.suite
    if not name or "/" in name or name in (".", ".."):
        raise BadInput(f"--name: {name!r} is not a folder name")
    sweep_dir = os.path.abspath(os.path.join(cfg.out, name))
    points = suites.plan(args.suite, cfg.replace(out=os.path.join(sweep_dir, "runs")), opts, pool)
    if args.dry_run:
        print_plan(args.suite, sweep_dir, points, sweep.peek_done(sweep_dir), as_json=args.json)
        return 0
    done = sweep.open_sweep(sweep_dir, args.suite, cfg, opts, pool, points)
    if any(done.get(p.id, {}).get("status") not in sweep.DONE_STATUSES for p in points):
        # Every host of the pool, before the first point: a point on a subset would not meet a bad host
        # (or an --out it does not share) until later points have spent their time.
        gate.preflight(cfg, placement, run_root=sweep_dir)
    # Progress goes to stderr even with --json: stdout holds only the JSON document.
    rc = sweep.run_points(points, hosts, sweep_dir, done, run_one=run, view=SweepProgress(os.path.basename(sweep_dir)),
                          as_json=args.json, follow=lambda p, latest: suites.follow_ups(p, latest, opts, pool))
    if not args.json and os.path.exists(os.path.join(sweep_dir, "results.jsonl")):
        from bench.render.report import print_paths
        print_paths([os.path.join(sweep_dir, "results.jsonl")])
    return rc
