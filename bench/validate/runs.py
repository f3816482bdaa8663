"""The jobs bench validate launches, each once for all the nodes it covers: failures come back, never raise.

    rec = alone(v, v.good_resources(), tag="throughput")     # every GPU alone, all at once (bench.jobs.alone)
    rec = numerics(v, v.good_resources())                    # the deterministic job on every GPU
    rec = comm(v, resources, groups, names, rounds, sizes, tag="intra-node")
    rec = training(v, resources, steps)                      # one data-parallel run

Every job is launched by bench.jobs without its own preflight and probe
(validate did both once), its folder under the validate folder's runs/.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from bench.core.errors import BadInput, RunFailed
from bench.jobs import comm as comm_job
from bench.jobs import numerics as numerics_job
from bench.jobs import train
from bench.jobs.gate import accel_of
from bench.validate import checks
from bench.validate.checks import launches
from bench.validate.state import Measured, Validation


def _failed(e: Exception, where: str) -> dict[str, Any]:
    return {"status": "failed", "error": {"where": where, "reason": str(e).splitlines()[0]}}


def _done(rec: dict[str, Any]) -> dict[str, Any]:
    """A job that Ctrl-C (or SIGTERM) stopped measured nothing: validate stops too, it does not judge it."""
    if rec.get("status") == "interrupted":
        raise KeyboardInterrupt
    return rec


def _accel(v: Validation) -> str | None:
    """The nodes' accelerator backend a launch names (their ranks' visible-devices variable): the verdict's."""
    return accel_of(v.device, v.figures.get("verdict") or {})


def _inspected(v: Validation, hosts) -> tuple[list[dict], dict]:
    return [v.inventory[h] for h in hosts if h in v.inventory], v.figures.get("verdict") or {}


def numerics_spec(v: Validation) -> numerics_job.NumericsSpec:
    """The level's numerics job for the nodes' device."""
    lv = v.level
    cuda = v.device == "cuda"
    return numerics_job.NumericsSpec(model=lv.numerics_model, steps=lv.numerics_steps,
                                     matmul_check_n=2048 if cuda else 512,
                                     matmul_n=lv.matmul_n_gpu if cuda else 1024, matmul_dtype="auto")


def _first(v: Validation, resources: dict[str, list[int]], tag: str, with_numerics: bool) -> dict | None:
    """plan.json's "numerics" where the launch runs the numerics job first (bench.jobs.numerics.first)."""
    if not with_numerics:
        return None
    return numerics_job.first(numerics_spec(v), f"{tag}-numerics-{v.launches}",
                              sum(len(s) for s in resources.values()), v.launch_timeout(resources))


def _started(v: Validation, rec: dict[str, Any], t0: float) -> None:
    """The launch's start-up, apart from its checks: from the launch until its last rank began its first
    measured phase (bench.worker.bootstrap.mark_started, told bench's hub; the launch keeps them in ranks.json);
    added to the stage's (state.Validation.startup_s)."""
    try:
        with open(os.path.join(rec.get("run_dir") or "", "ranks.json")) as f:
            marks = [float(s["started_at"]) for s in json.load(f).values() if s.get("started_at") is not None]
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        marks = []
    if marks:
        v.startup_s += max(marks) - t0


def _phases(v: Validation, resources: dict[str, list[int]], tag: str, extras: bool) -> dict[str, Any]:
    """Mode's phases for the per-GPU launch that carries them (extras): each phase a wanted check rides
    (bench.validate.checks: the copies for the copies and memory checks, the burn where --burn or the level gives
    it time), with its barrier."""
    if not extras:
        return {}
    world, wait = sum(len(s) for s in resources.values()), v.launch_timeout(resources) / 2
    out: dict[str, Any] = {}
    for phase in checks.phases(v.cfg.wanted, launches.PER_GPU.name):
        spec = phase.spec(v.cfg, v.device) if phase.spec is not None else None
        if spec is not None:
            out[phase.name] = {**spec, "barrier": {"name": f"{tag}-{phase.name}-{v.launches}", "count": world,
                                                   "timeout_s": wait}}
    return out


def alone(v: Validation, resources: dict[str, list[int]], tag: str, steps: int | None = None,
          with_numerics: bool = False, extras: bool = False) -> dict[str, Any]:
    """Every slot of resources trains alone, all at once, their first steps together (a barrier); with_numerics,
    each runs the numerics job first (the record's "numerics": one launch for the per-GPU checks); with extras,
    its copies after that and its burn after its steps, where asked for (v.phases_ahead, for their checks)."""
    v.launches += 1
    world = sum(len(s) for s in resources.values())
    barrier = {"name": f"{tag}-{v.launches}", "count": world,
               "timeout_s": v.launch_timeout(resources) / 2}
    cfg = v.run_config(list(resources), steps or v.level.steps)
    phases = _phases(v, resources, tag, extras)
    t0 = time.time()
    try:
        rec = train.run(cfg, v.hosts.only(resources), train.Mode(
            quiet=True, inspected=_inspected(v, resources), start_barrier=barrier, independent=True,
            numerics=_first(v, resources, tag, with_numerics), **phases))
    except (RunFailed, BadInput) as e:
        rec = _failed(e, "bench run")
    _started(v, rec or {}, t0)
    v.runs[tag] = (rec or {}).get("run_dir", "")
    return _done(rec or {})


def keep_phases(v: Validation, resources: dict[str, list[int]], rec: dict[str, Any]) -> None:
    """The copies and burn entries of a per-GPU launch that carried them (alone's extras), kept for their checks."""
    for name in _phases(v, resources, "", True):
        v.phases_ahead[name] = Measured(resources, tuple(rec.get(name) or ()), rec.get("run_dir"), rec.get("error"))


def training(v: Validation, resources: dict[str, list[int]], steps: int) -> dict[str, Any]:
    """One short data-parallel run over resources, recorded as `bench run` records it."""
    v.launches += 1
    cfg = v.run_config(list(resources), steps)
    t0 = time.time()
    try:
        rec = train.run(cfg, v.hosts.only(resources), train.Mode(quiet=True, inspected=_inspected(v, resources)))
    except (RunFailed, BadInput) as e:
        rec = _failed(e, "bench run")
    _started(v, rec or {}, t0)
    v.runs["training"] = (rec or {}).get("run_dir", "")
    return _done(rec or {})


def numerics(v: Validation, resources: dict[str, list[int]], spec: numerics_job.NumericsSpec) -> dict[str, Any]:
    v.launches += 1
    t0 = time.time()
    try:
        rec = numerics_job.run(resources, v.launcher_for(list(resources)), v.device, spec,
                               out_root=os.path.join(v.vdir, "runs"), timeout=v.launch_timeout(resources),
                               container_exec=v.cfg.container_exec, master_addr=v.master_addr_for(list(resources)),
                               accel=_accel(v))
    except (RunFailed, BadInput) as e:
        rec = _failed(e, "numerics")
    _started(v, rec, t0)
    v.runs["numerics"] = rec.get("run_dir", "")
    return _done(rec)


def comm(v: Validation, resources: dict[str, list[int]], groups: list[list[int]], names: list[str],
         rounds: list[list[int]], sizes: list[int], tag: str, with_numerics: bool = False,
         environ: dict[str, str] | None = None) -> dict[str, Any]:
    """All-reduce over groups of global ranks of resources, the groups of a round at the same time; with_numerics,
    every rank runs the numerics job first (the record's "numerics"); environ: the ranks' environment's source
    (bench.validate.rails: one NIC named)."""
    v.launches += 1
    t0 = time.time()
    try:
        rec = comm_job.measure(resources, v.launcher_for(list(resources)), v.device, op="all_reduce", sizes=sizes,
                               iters=v.level.iters, warmup=v.level.comm_warmup,
                               out_root=os.path.join(v.vdir, "runs"), groups=groups, group_names=names,
                               rounds=rounds, timeout=v.launch_timeout(resources),
                               numerics=_first(v, resources, tag, with_numerics), environ=environ,
                               container_exec=v.cfg.container_exec, master_addr=v.master_addr_for(list(resources)),
                               accel=_accel(v))
    except (RunFailed, BadInput) as e:
        rec = _failed(e, "bench comm")
    _started(v, rec, t0)
    v.runs[tag] = rec.get("run_dir", "")
    return _done(rec)


def ranks_of(resources: dict[str, list[int]]) -> dict[str, list[int]]:
    """Each host's global ranks in a launch over resources (host by host, slot by slot)."""
    out, k = {}, 0
    for h, slots in resources.items():
        out[h] = list(range(k, k + len(slots)))
        k += len(slots)
    return out


def phase_entries(v: Validation, res: dict[str, list[int]], phase: str) -> Measured:
    """What a phase ("copies", "burn") measured for the GPUs of res: from the per-GPU launch that ran it, else a
    launch of its own (a short per-GPU run: --checks without throughput)."""
    if phase not in v.phases_ahead:
        keep_phases(v, res, alone(v, res, phase, steps=v.level.timing_warmup + 2, extras=True))
    ahead = v.phases_ahead.get(phase) or Measured({}, ())
    v.runs.setdefault(phase, ahead.run_dir or "")
    return ahead.of(res)
