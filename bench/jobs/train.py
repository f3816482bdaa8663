"""One training job: plan it, launch its ranks, watch them, and record the result.

    from bench.jobs.train import Mode, dry_run, run
    rec = run(RunConfig(gpus=2, dataset="synthetic", steps=30), HostSelection())
    rec = run(cfg, hosts, Mode(quiet=True, out_dir="results/strong/runs"))   # a sweep's point
    doc = dry_run(cfg, hosts)          # --dry-run's document: config, plan, DeepSpeed JSON, command

The ranks are started by DeepSpeed's own launcher (bench.launch) in their
own process session; their figures come back through summary.json in the
run directory, never through stdout. The record says how it ended: ok,
failed (the failing rank named, with its last log lines), oom, interrupted.
A run goes through four phases, one function each: _plan (every refusal of
the input, before a host is reached or a run dir reserved), _inspect (the
hosts' preflight and inventory), _launch_plan (the nodes' device, the
DeepSpeed JSON, the launch argv) and the launch with its record.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from bench.analysis import figures, volume
from bench.cluster.hostfile import HostSelection
from bench.core import dsconfig, parallel, provenance, results, storage
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.jobs import alone, nvme, phases
from bench.jobs import numerics as numerics_job
from bench.jobs.mode import Mode
from bench.jobs.gate import accel_of, check_precision, device_follows_nodes, device_of, inspect_cluster
from bench.jobs.plan import Placement, plan_resources
from bench.launch import plan as launch_plan
from bench.launch.base import LaunchPlan
from bench.launch.execute import Outcome, execute

NOMINAL_STEPS = 50  # without --steps or --epochs


@dataclass(frozen=True, slots=True)
class _Planned:
    """A run's input, checked: what the phases after _plan read."""

    cfg: RunConfig
    placement: Placement
    split: dict[str, Any]        # T x P x D: which ranks form each tensor-parallel and data-parallel group
    data_parallel: int
    root: str                    # the results root
    user_ds: dict[str, str]      # the user's DeepSpeed JSON, by its content


def run(cfg: RunConfig, hosts: HostSelection, mode: Mode = Mode()) -> dict[str, Any]:
    """Plan, launch and record one run; returns its record."""
    p = _plan(cfg, hosts, mode)
    inventory, verdict = mode.inspected if mode.inspected is not None else _inspect(p, mode.quiet)
    run_id = results.new_run_id(p.root)
    run_dir = os.path.abspath(os.path.join(p.root, run_id))
    device, ds, lp, plan = _launch_plan(p, verdict, run_dir, mode)
    cfg = p.cfg if p.cfg.steps is not None or p.cfg.epochs is not None else p.cfg.replace(steps=NOMINAL_STEPS)
    results.write_json_atomic(os.path.join(run_dir, "config.json"), cfg.to_dict())
    results.write_json_atomic(os.path.join(run_dir, "plan.json"), plan)
    results.write_json_atomic(os.path.join(run_dir, "ds_config.json"), ds)
    launch_plan.write_files(lp, p.placement.resources, p.placement.slots_of)
    if device == "cpu" and not mode.quiet:
        print(f"bench: no GPU: running on CPU with gloo, {p.placement.world} rank(s)", file=sys.stderr)
    outcome = execute(lp, run_dir, timeout=cfg.timeout, on_progress=mode.on_progress,
                      expect_summary=not mode.independent)
    extra = {"inventory": inventory, "verdict": verdict, **p.user_ds, **mode.extra}
    if mode.independent:
        rec = alone.record(cfg, plan, run_id, run_dir, outcome, extra, ds, figures_of)
    else:
        rec = record(cfg, plan, run_id, run_dir, outcome, extra, ds_config=ds)
    if mode.numerics:  # the job every rank ran first: its own entry per rank, as its own launch would give
        rec["numerics"] = numerics_job.collect(run_dir, p.placement.resources, outcome, folder="numerics")
    for phase in ("copies", "burn"):  # what every rank ran beside its training (bench.jobs.phases)
        if getattr(mode, phase):
            rec[phase] = phases.collect(run_dir, p.placement.resources, outcome, phase)
    results.append(os.path.join(run_dir, "results.jsonl"), rec)
    return rec


def dry_run(cfg: RunConfig, hosts: HostSelection, *, inspected: tuple[list[dict], dict] | None = None) -> dict:
    """What `bench run --dry-run` prints: the resolved config, the plan, the DeepSpeed JSON, the exact command.

    It reaches no host and reserves no run directory; `inspected` stands for the nodes' inventory.
    """
    p = _plan(cfg, hosts, Mode(), check_data=False)
    verdict = inspected[1] if inspected is not None else {}
    _, ds, lp, plan = _launch_plan(p, verdict, os.path.abspath(os.path.join(p.root, "DRY-RUN")), Mode())
    return {"config": p.cfg.to_dict(), "plan": plan, "deepspeed_config": ds, "env_file": lp.env_file,
            "command": lp.shell(), "data": _data_said(p.cfg)}


def _data_said(cfg: RunConfig) -> dict[str, Any]:
    """A dry-run's word on the data set: a plan needs none, the run refuses a missing one (said here, not raised)."""
    if cfg.dataset == "synthetic":
        return {"dataset": "synthetic", "ready": True}
    from bench.core import datasets

    try:
        datasets.check_data_dir(cfg.dataset, cfg.data_dir)
    except BadInput as e:
        return {"dataset": cfg.dataset, "data_dir": cfg.data_dir, "ready": False,
                "why": f"{e}; the run refuses it (--download fetches it, --dataset synthetic needs none)"}
    return {"dataset": cfg.dataset, "data_dir": cfg.data_dir, "ready": True}


def _plan(cfg: RunConfig, hosts: HostSelection, mode: Mode, check_data: bool = True) -> _Planned:
    """Every refusal of the input, before any host is reached or any run dir reserved (the data set's but for a
    dry-run: check_data False)."""
    cfg = cfg.with_absolute_paths()
    placement = plan_resources(cfg, hosts)
    if not device_follows_nodes(cfg, placement):
        check_precision(cfg.precision, placement.device)  # else once the nodes' device is known (_launch_plan)
    if cfg.dataset != "synthetic" and check_data:
        from bench.core import datasets  # numpy: not for `bench --help`

        if cfg.download:
            datasets.fetch(cfg.dataset, cfg.data_dir)
        datasets.check_data_dir(cfg.dataset, cfg.data_dir)
    if placement.world % cfg.pipeline_stages:
        raise BadInput(f"--pipeline-stages: {cfg.pipeline_stages} stages do not divide {placement.world} rank(s)")
    # T x P x D: which ranks form each tensor-parallel group (inside a node unless asked otherwise).
    split = parallel.check_placement(cfg, placement.resources)
    # An independent rank is a run of its own: its batch is the micro batch times accumulation.
    data_parallel = 1 if mode.independent else split["data_parallel"]
    dsconfig.batch_sizes(dsconfig.build(cfg, data_parallel, cfg.steps or NOMINAL_STEPS), data_parallel)
    launch_plan.check(placement.resources, placement.launcher, placement.device, cfg.container_exec)
    # The record names a user DeepSpeed JSON by its content: the same path may hold another file tomorrow.
    user_ds = {"deepspeed_config_sha256": _sha256(cfg.deepspeed_config)} if cfg.deepspeed_config else {}
    return _Planned(cfg, placement, split, data_parallel, mode.out_dir or cfg.out, user_ds)


def _inspect(p: _Planned, quiet: bool) -> tuple[list[dict], dict]:
    """Room for the run, the NVMe swap path, every host's preflight and inventory, and their verdict."""
    storage.check_room(p.root, p.placement.world)
    nvme.check(p.cfg, p.placement)
    return inspect_cluster(p.cfg, p.placement, quiet, precision=p.cfg.precision, micro_batch=p.cfg.micro_batch,
                           run_root=p.root)


def _launch_plan(p: _Planned, verdict: dict, run_dir: str,
                 mode: Mode) -> tuple[str, dict[str, Any], LaunchPlan, dict[str, Any]]:
    """(the nodes' device, the DeepSpeed JSON, the launch plan, plan.json) for run_dir."""
    cfg, placement = p.cfg, p.placement
    device = device_of(cfg, placement, verdict)
    check_precision(cfg.precision, device)
    # For the nodes' device: ZeRO-Offload pins its host buffers on GPU runs only.
    ds = dsconfig.build(cfg, p.data_parallel, cfg.steps or NOMINAL_STEPS, device=device)
    lp = launch_plan.build(placement.resources, placement.launcher, run_dir, device, cfg.master_addr,
                           cfg.master_port, container_exec=cfg.container_exec, independent=mode.independent,
                           accel=accel_of(device, verdict))
    plan = launch_plan.plan_json(lp, placement.resources, device, cfg.timeout, cfg.collective_timeout)
    plan["parallel"] = p.split
    if mode.start_barrier:
        plan["start_barrier"] = mode.start_barrier
    if mode.independent:
        plan["independent"] = True
    for part in ("numerics", "copies", "burn"):
        if getattr(mode, part):
            plan[part] = getattr(mode, part)
    return device, ds, lp, plan


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def record(cfg: RunConfig, plan: dict, run_id: str, run_dir: str, outcome: Outcome,
           extra: dict[str, Any], ds_config: dict[str, Any] | None = None) -> dict[str, Any]:
    summary = outcome.summary
    body: dict[str, Any] = {"run_id": run_id, "run_dir": run_dir, "config": cfg.to_dict(), "plan": plan,
                            "duration_s": outcome.duration_s, **extra}
    body["provenance"] = provenance.collect(plan, summary)
    if outcome.status == "ok" and summary is not None:
        body["figures"] = figures_of(cfg, summary, plan["world_size"], ds_config)
        sanity = body["figures"]["sanity"]
        if not all(sanity.values()):
            body["warnings"] = [f"sanity: {k} is false" for k, v in sanity.items() if not v]
    else:
        body["error"] = outcome.error
    return results.make_record("run", outcome.status, **body)


def figures_of(cfg: RunConfig, summary: dict[str, Any], planned_world: int,
               ds_config: dict[str, Any] | None) -> dict[str, Any]:
    """The record's figures of a summary the ranks wrote (a run's, or one rank's alone)."""
    return figures.from_summary(
        summary, micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum, planned_world=planned_world,
        flops_per_image=summary.get("flops_per_image"), precision=cfg.precision,
        strategy=volume.strategy_of(cfg.engine, cfg.zero_stage, reshard_after_forward=cfg.reshard_after_forward,
                                    pipeline_stages=cfg.pipeline_stages),
        comm_bytes_per_element=volume.comm_bytes_per_element(
            cfg.precision, (ds_config or {}).get("communication_data_type")),
        pipeline_stages=cfg.pipeline_stages, tensor_parallel=cfg.tensor_parallel,
        recompute=cfg.activation_checkpointing,
        # FSDP2's MixedPrecisionPolicy reduces gradients in fp32 (bench.worker.fsdp2).
        reduce_bytes_per_element=4 if cfg.engine == "fsdp2" else None)
