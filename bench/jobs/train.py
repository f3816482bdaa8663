"""One training job: plan it, launch its ranks, watch them, and record the result.

    from bench.jobs.train import run
    rec = run(RunConfig(gpus=2, dataset="synthetic", steps=30), HostSelection())

The ranks are started by DeepSpeed's own launcher (bench.launch) in their
own process session; their figures come back through summary.json in the
run directory, never through stdout. The record says how it ended: ok,
failed (the failing rank named, with its last log lines), oom, interrupted.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Callable

from bench.analysis import figures, volume
from bench.cluster.hostfile import HostSelection
from bench.core import dsconfig, parallel, provenance, results, storage
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.jobs import alone, nvme
from bench.jobs.gate import check_precision, device_follows_nodes, device_of, inspect_cluster
from bench.jobs.plan import plan_resources
from bench.launch.execute import Outcome, execute
from bench.launch.plan import build, plan_json, write_files


def run(cfg: RunConfig, hosts: HostSelection, *, dry_run: bool = False, quiet: bool = False,
        out_dir: str | None = None, extra: dict[str, Any] | None = None,
        inspected: tuple[list[dict], dict] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        start_barrier: dict[str, Any] | None = None, independent: bool = False) -> dict[str, Any] | None:
    """Plan, launch and record one run; returns its record (None for a dry run, which prints the plan).

    inspected: (inventory, verdict) already taken by the caller (bench validate
    probes once for all its runs), so this run does not reach the hosts again.
    start_barrier: {"dir", "count", "timeout_s"}: the ranks start their first
    step only once `count` runs have reached it (bench.worker.barrier), so
    runs launched together are measured together.
    independent: every rank trains alone, in a world of one, with no communication (bench validate's
    per-GPU runs); the record's "alone" lists each rank's own figures (bench.jobs.alone).
    """
    cfg = cfg.with_absolute_paths()
    placement = plan_resources(cfg, hosts)
    resources, device = placement.resources, placement.device
    if not device_follows_nodes(cfg, placement):
        check_precision(cfg.precision, device)  # else once the nodes' device is known, below
    world = placement.world
    if cfg.dataset != "synthetic":
        from bench.core import datasets  # numpy: not for `bench --help`

        if cfg.download:
            datasets.fetch(cfg.dataset, cfg.data_dir)
        datasets.check_data_dir(cfg.dataset, cfg.data_dir)
    if world % cfg.pipeline_stages:
        raise BadInput(f"--pipeline-stages: {cfg.pipeline_stages} stages do not divide {world} rank(s)")
    # T x P x D: which ranks form each tensor-parallel group (inside a node unless asked otherwise).
    split = parallel.check_placement(cfg, resources)
    data_parallel = split["data_parallel"]
    nominal_steps = cfg.steps or 50
    if independent:
        data_parallel = 1  # each rank is a run of its own: its batch is the micro batch times accumulation
    ds = dsconfig.build(cfg, data_parallel, nominal_steps)
    dsconfig.batch_sizes(ds, data_parallel)
    # The record names a user DeepSpeed JSON by its content: the same path may hold another file tomorrow.
    user_ds = {"deepspeed_config_sha256": _sha256(cfg.deepspeed_config)} if cfg.deepspeed_config else {}
    root = out_dir or cfg.out

    def build_launch(run_dir: str, device: str):
        return build(resources, placement.launcher, run_dir, device, cfg.master_addr, cfg.master_port,
                     container_exec=cfg.container_exec)

    # Every refusal of the input comes before any host is reached or any run dir reserved.
    build_launch(os.path.join(root, "PENDING"), device)
    # A dry run reaches no host: it prints what would be launched.
    if inspected is not None:
        inventory, verdict = inspected
    elif dry_run:
        inventory, verdict = [], {}
    else:
        storage.check_room(root, world)
        nvme.check(cfg, placement)
        inventory, verdict = inspect_cluster(cfg, placement, quiet, precision=cfg.precision,
                                             micro_batch=cfg.micro_batch, run_root=root)
    device = device_of(cfg, placement, verdict)
    check_precision(cfg.precision, device)
    # Again for the nodes' device: ZeRO-Offload pins its host buffers on GPU runs only.
    ds = dsconfig.build(cfg, data_parallel, nominal_steps, device=device)
    run_id = "DRY-RUN" if dry_run else results.new_run_id(root)
    run_dir = os.path.abspath(os.path.join(root, run_id))
    lp = build_launch(run_dir, device)
    plan = plan_json(lp, resources, device, cfg.timeout, cfg.collective_timeout)
    plan["parallel"] = split
    if start_barrier:
        plan["start_barrier"] = start_barrier
    if independent:
        plan["independent"] = True
    if dry_run:
        print(json.dumps({"config": cfg.to_dict(), "plan": plan, "deepspeed_config": ds,
                          "env_file": lp.env_file, "command": lp.shell()}, indent=2))
        return None

    if cfg.steps is None and cfg.epochs is None:
        cfg = cfg.replace(steps=nominal_steps)
    results.write_json_atomic(os.path.join(run_dir, "config.json"), cfg.to_dict())
    results.write_json_atomic(os.path.join(run_dir, "plan.json"), plan)
    results.write_json_atomic(os.path.join(run_dir, "ds_config.json"), ds)
    write_files(lp, resources, placement.slots_of)

    if device == "cpu" and not quiet:
        print(f"bench: no GPU: running on CPU with gloo, {world} rank(s)", file=sys.stderr)
    outcome = execute(lp, run_dir, timeout=cfg.timeout, on_progress=on_progress, expect_summary=not independent)
    if independent:
        rec = alone.record(cfg, plan, run_id, run_dir, outcome,
                           {"inventory": inventory, "verdict": verdict, **user_ds, **(extra or {})}, ds, figures_of)
    else:
        rec = record(cfg, plan, run_id, run_dir, outcome,
                     {"inventory": inventory, "verdict": verdict, **user_ds, **(extra or {})}, ds_config=ds)
    results.append(os.path.join(run_dir, "results.jsonl"), rec)
    return rec


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
