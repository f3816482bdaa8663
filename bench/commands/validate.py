"""`bench validate`: an acceptance test of a cluster, GPU by GPU, link by link, and what to drain.

    bench validate --hostfile hostfiles/vector                        # quick: minutes
    bench validate --hostfile hostfiles/vector --level full --junit validate.xml --drain-file drain.txt
    salloc -N 4 --gpus-per-node 8 bench validate                    # inside Slurm: srun steps, no ssh
    bench validate --level prolog                                     # this node, seconds: a Slurm Prolog
    bench validate --level health --drain --undrain                    # counters only: HealthCheckProgram
    bench validate --health-from saved/node7                          # a node's saved reports, offline
    bench validate --hostfile hostfiles/vector --level full --dry-run # the plan and its time; nothing runs

The checks and their order are bench.validate.stages'. Exit 0: every node
judged and none to drain (WARNs allowed, shown); 1: a node to drain (or a
cluster check FAILed); 3: nothing to drain, but a node could not be checked
(unknown: a scheduler must not trust it); 2: bad input. --json prints one
document (the "validate" record, with "nodes": each node's verdict and
action); the table shows a summary per check, every row that is not PASS
(--all: every row) and each node's verdict; --level prolog and health print
one line. report.html beside the record is the page a person opens: every
node a cell of a grid, what to drain, the pairs, the GPUs (bench.render.html;
`bench report --html` writes the same from copied results).
"""

from __future__ import annotations

import json
import os
import sys

from bench.cluster.hostfile import HostSelection
from bench.commands.common import add_dry_run_flag, add_json_flag, add_metrics_flag, check_metrics_file, write_metrics
from bench.commands.profile import recorded
from bench.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNKNOWN
from bench.core.options import add_options, from_args
from bench.validate.config import THIS_NODE, ValidateConfig
from bench.validate.stages import validate

HELP = ("acceptance-test a cluster: every GPU alone, bit-exact numerics, links inside and between nodes, a DP "
        "run, stragglers, scaling, and what to drain")


def add_arguments(p) -> None:
    add_options(p, ValidateConfig)
    add_options(p, HostSelection, skip=("num_gpus",))
    add_json_flag(p)
    add_metrics_flag(p)
    add_dry_run_flag(p, "print the plan: each stage's launches, rounds, pairs and timeout, the predicted time to a "
                        "verdict and the budget; reach no node, launch nothing")


def main(args) -> int:
    _this_node_only(args)
    cfg = from_args(ValidateConfig, args)
    check_metrics_file(args.metrics_file)
    if args.dry_run:
        return _dry_run(cfg, from_args(HostSelection, args), args.json)
    if cfg.soak is not None:
        return _soak(cfg, args)
    rec = validate(cfg, from_args(HostSelection, args), sources=recorded(args))
    write_metrics(args.metrics_file, rec)
    if (rec.get("measured") or {}).get("burn"):
        from bench.render.burn import plots
        for path in plots(rec, rec["run_dir"]):
            print(f"plot: {path}", file=sys.stderr)
    if cfg.junit:
        from bench.render.junit import write
        write(cfg.junit, rec["checks"], duration_s=rec["duration_s"])
    _page(rec)
    if args.json:
        print(json.dumps(rec))
    elif rec["level"] in THIS_NODE and not cfg.all and not rec["hosts"][1:]:
        from bench.render.validate import one_line
        print(one_line(rec))
    else:
        from bench.render.validate import render
        render(rec, every_row=cfg.all)
    return rec["exit_status"]


def _this_node_only(args) -> None:
    """--level prolog and health check this node: a site profile's hostfile and launcher (for the cluster's
    levels) are left out there, said on stderr; given on the command line they are refused as before."""
    sources = getattr(args, "_sources", {})
    if (args.level or "quick") not in THIS_NODE:
        return
    for dest, flag in (("hostfile", "--hostfile"), ("launcher", "--launcher")):
        where = sources.get(dest)
        if where and where != "command line":
            print(f"bench validate: --level {args.level} checks this node: {flag} of {where} left out",
                  file=sys.stderr)
            setattr(args, dest, None)


def _page(rec) -> None:
    """report.html beside the record (bench.render.html): what a person opens. A page that cannot be written is
    said on stderr; the verdict and its exit status stand, the record and the files for scripts are written."""
    from bench.core.errors import StorageFailed
    from bench.render.html.report import beside

    try:
        path, sizes = beside(rec)
    except StorageFailed as e:
        print(f"bench validate: report.html not written: {e}", file=sys.stderr)
        return
    print(f"report: {path} ({sizes['total'] / 1e6:.1f} MB)", file=sys.stderr)


def _soak(cfg: ValidateConfig, args) -> int:
    """--soak: rounds until the duration is spent; the metrics file rewritten after every round."""
    from bench.validate.soak import soak

    def on_round(rec) -> None:
        write_metrics(args.metrics_file, rec)
        if (rec.get("measured") or {}).get("burn"):  # the round's node hot at once: a plot per node
            from bench.render.burn import plots
            plots(rec, rec["run_dir"])
        _page(rec)
        if not args.json:
            print(f"bench validate --soak: round {rec['soak']['round']}: {rec['result']} "
                  f"({rec['duration_s']:.0f} s; {rec['soak']['elapsed_s']:.0f} of {rec['soak']['duration_s']:.0f} s)",
                  file=sys.stderr, flush=True)

    rec = soak(cfg, from_args(HostSelection, args), on_round=on_round)
    from bench.render.soak import plot, render
    if rec["trends"]:
        print(f"plot: {plot(os.path.join(rec['run_dir'], 'soak.png'), rec)}", file=sys.stderr)
    if args.json:
        print(json.dumps(rec))
    else:
        render(rec)
    return EXIT_FAILED if rec["result"] == "FAIL" else EXIT_UNKNOWN if rec["result"] == "ERROR" else EXIT_OK


def _dry_run(cfg: ValidateConfig, hosts: HostSelection, as_json: bool) -> int:
    """The plan of bench.validate.budget for the hosts bench validate would check; no host is reached."""
    from bench.validate.budget import plan, stage_rows
    from bench.validate.stages import refuse

    w, table, found = refuse(cfg, hosts)  # what the run would refuse, refused here too
    p = plan(cfg, w.resources, w.launcher, table, found)
    # How the ranks start, as the run would start them (a site profile's, else the defaults).
    launch = {"launcher": w.launcher, "hosts": list(w.resources), "container_exec": cfg.container_exec,
              "master_addr": cfg.master_addr, "timeout_s": cfg.timeout}
    print(json.dumps({**p, "launch": launch}) if as_json else "\n".join(
        [*stage_rows(p), "launch: " + ", ".join(f"{k} {v}" for k, v in launch.items() if v not in (None, []))]))
    return EXIT_OK
