"""tune.json from a finished (or stopped) search: every trial, the ranking, the verdict, the advice, the command.

    doc = build(tuner, status, why, hosts)
    run_argv(cfg, hosts)      # ["bench", "run", "--gpus", "2", ...]: the options where cfg differs from the defaults

The command reproduces the winner's trial exactly (its steps too): bench
run's options where the trial's RunConfig differs from RunConfig's defaults,
plus the host options the tune was given, joined with shlex.join. The
run-local fields (--out, --master-port) are left out.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from typing import Any

from bench.analysis import tune as figures
from bench.cluster.hostfile import HostSelection
from bench.core.config import RunConfig
from bench.core.options import option_name

# Where a run writes and how it meets are not what it measures.
_LEFT_OUT = ("out", "master_port", "master_addr")


def _flags(obj: Any, defaults: Any, skip: tuple[str, ...] = ()) -> list[str]:
    argv: list[str] = []
    for f in dataclasses.fields(obj):
        value, default = getattr(obj, f.name), getattr(defaults, f.name)
        if f.name in skip or value == default or "help" not in f.metadata:
            continue
        name = option_name(f.name)
        if isinstance(value, bool):
            argv.append(name if value else "--no-" + name[2:])
        elif value is not None:
            argv += [name, str(value)]
    return argv


def run_argv(cfg: RunConfig, hosts: HostSelection) -> list[str]:
    """`bench run` argv reproducing cfg on hosts (module docstring)."""
    return ["bench", "run", *_flags(cfg, RunConfig(), _LEFT_OUT), *_flags(hosts, HostSelection())]


def _mib(b: float | None) -> str:
    return "?" if b is None else f"{b / 2**20:.0f} MiB"


def recommendation(rows: list[dict[str, Any]], v: dict[str, Any], device: str, memory_note: str,
                   ceilings: dict[str, int | None], status: str) -> str:
    """One paragraph: what to use and why, from the ranking and the verdict."""
    if not rows:
        return f"No candidate ran ok ({status}); nothing to recommend. See the trials in tune.json."
    a = rows[0]
    out = [f"Use {a['strategy']} on {a['gpus']} {'GPU' if device == 'cuda' else 'rank'}(s) at micro batch "
           f"{a['micro_batch']} x accumulation {a['grad_accum']} (global batch {a['global_batch']}): "
           f"{a['images_per_s']:.1f} img/s over {a['runs']} run(s) of {a['steps']} steps"]
    if a["spread"] is not None:
        out[-1] += f" (spread {a['spread']:.1f})"
    out[-1] += "."
    if v["verdict"] == "tie":
        b = rows[1]
        out.append(f"It ties with {b['strategy']} on {b['gpus']} at micro batch {b['micro_batch']} "
                   f"({b['images_per_s']:.1f} img/s): {v['reason']}; either will do, and the other is the better "
                   "choice if it needs less memory or fewer GPUs.")
    elif v["runner_up"]:
        out.append(f"It {v['reason']} ({rows[1]['key']}).")
    fits = ", ".join(f"{s} {m}" if m else f"{s} none" for s, m in ceilings.items())
    if fits:
        out.append(f"Largest micro batch that fit, by strategy: {fits}.")
    if a.get("efficiency") is not None and a["gpus"] > 1:
        out.append(f"At {a['gpus']} ranks it runs at {a['efficiency']:.0%} of {a['gpus']}x one GPU's throughput.")
    if a.get("comm_share") is not None:
        out.append(f"Communication is {a['comm_share']:.0%} of a step.")
    if a.get("mfu") is None and a.get("mfu_reason"):
        out.append(f"No MFU: {a['mfu_reason']}.")
    out.append(f"Memory: {memory_note}.")
    if status != "ok":
        out.append(f"The search stopped early ({status}): this is the best of what ran.")
    return " ".join(out)


def build(tuner, status: str, why: str | None, hosts: HostSelection) -> dict[str, Any]:
    trials = list(tuner.trials.values())
    rows = figures.rank(trials)
    v = figures.verdict(rows)
    runs, seconds = tuner.spent()
    argv = None
    if rows:
        a = rows[0]
        from bench.experiments.tune_search import Candidate

        p = tuner.point(Candidate(a["strategy"], a["gpus"], a["micro_batch"], a["grad_accum"]), a["steps"], 1, "")
        run_hosts = HostSelection(hostfile=hosts.hostfile, include=p.include) if p.include else hosts
        argv = run_argv(p.config, run_hosts)
    return {
        "schema_version": figures.SCHEMA_VERSION, "kind": "tune", "status": status, "stopped": why,
        "name": os.path.basename(tuner.dir), "dir": tuner.dir, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": tuner.pool.device, "base_config": tuner.base.to_dict(),
        "options": {k: getattr(tuner.opts, k) for k in tuner.opts.__slots__},
        "pool": {"resources": tuner.pool.resources, "hostfile": tuner.pool.hostfile},
        "memory": {"capacity_bytes": tuner.capacity, "note": tuner.memory_note(),
                   "model": dataclasses.asdict(tuner.dims) if tuner.dims else None},
        "budget": {"runs": tuner.opts.budget_runs, "minutes": tuner.opts.budget_minutes, "spent_runs": runs,
                   "spent_s": seconds},
        "space": {"strategies": tuner.space.strategies, "gpu_counts": tuner.space.counts,
                  "micro_batches": tuner.space.ladder, "grad_accums": tuner.space.accums,
                  "global_batch": tuner.space.global_batch, "notes": tuner.space.notes},
        "ceilings": tuner.ceilings, "trials": trials, "pruned": tuner.space.pruned, "ranking": rows, "verdict": v,
        "recommendation": recommendation(rows, v, tuner.pool.device, tuner.memory_note(), tuner.ceilings, status),
        "argv": argv, "command": shlex.join(argv) if argv else None,
    }
