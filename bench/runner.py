"""`bench run`: plan a run, launch its ranks, watch them, and record the result.

    bench --gpus 2 --dataset synthetic --steps 30 --json
    bench run --hostfile hostfiles/tesla --launcher openmpi --dataset cifar10 --epochs 1
    bench run --dry-run --zero-stage 2 --precision bf16

The ranks are started by DeepSpeed's own launcher (see launch.py) in their
own process session; their figures come back through summary.json in the
run directory, never through stdout. Exit: 0 ok, 1 the run failed (the
failing rank is named, with its last log lines), 2 bad input, 130 Ctrl-C.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from bench import dsconfig, hostfile, launch, results
from bench.config import RunConfig, add_run_arguments, config_from_args
from bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, BadInput
from bench.execute import Outcome, execute

HELP = "train a timm ViT with DeepSpeed on this node or a hostfile's nodes, and record the figures"


def add_arguments(p) -> None:
    add_run_arguments(p)
    hostfile.add_host_arguments(p, num_gpus=False)
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved config, the DeepSpeed JSON and the launch command; launch nothing")
    p.add_argument("--json", action="store_true", help="print the result record on stdout and nothing else")


def main(args) -> int:
    cfg = config_from_args(args)
    rec = run(cfg, args, dry_run=args.dry_run, quiet=args.json)
    if rec is None:
        return 0
    if args.json:
        print(json.dumps(rec))
    return {"ok": 0, "interrupted": EXIT_INTERRUPTED}.get(rec["status"], EXIT_FAILED)


def local_gpu_count() -> int:
    """GPUs on this node without importing torch (nvidia-smi -L), 0 when none answer."""
    from bench.hosts_cmd import smi_gpu_count

    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return 0
    return smi_gpu_count()[0]


def plan_resources(cfg: RunConfig, args) -> tuple[dict[str, list[int]], dict[str, int] | None, str, str]:
    """(resources, hostfile slots, launcher, device) for this run."""
    gpus_here = local_gpu_count() if cfg.device != "cpu" else 0
    device = cfg.device if cfg.device != "auto" else ("cuda" if gpus_here else "cpu")
    if getattr(args, "hostfile", None) or cfg.launcher == "slurm":
        # Inside a Slurm allocation the allocation is the hostfile.
        slots_of = hostfile.parse_hostfile(args.hostfile) if args.hostfile else launch.slurm_hosts()
        resources = hostfile.resolve_resources(slots_of, args.include or "", args.exclude or "",
                                               args.num_nodes, cfg.gpus or -1)
        launcher = cfg.launcher or ("pdsh" if len(resources) > 1 else "local")
        if launcher == "local" and len(resources) > 1:
            raise BadInput(f"--launcher local: the hostfile selects {len(resources)} hosts; use pdsh, openmpi or slurm")
        if launcher == "local":
            resources = {"localhost": list(range(len(next(iter(resources.values())))))}
        return resources, slots_of, launcher, device
    for opt in ("include", "exclude"):
        if getattr(args, opt, ""):
            raise BadInput(f"--{opt}: needs --hostfile")
    if cfg.launcher not in (None, "local"):
        raise BadInput(f"--launcher {cfg.launcher}: needs --hostfile")
    if device == "cuda" and cfg.device == "cuda" and not gpus_here:
        raise BadInput("--device cuda: no GPU is visible on this node (nvidia-smi -L lists none)")
    n = cfg.gpus or (gpus_here if device == "cuda" else 2)
    if device == "cuda" and n > gpus_here:
        raise BadInput(f"--gpus {n}: this node has {gpus_here} GPU(s)")
    return {"localhost": list(range(n))}, None, "local", device


def inspect_cluster(cfg: RunConfig, resources: dict[str, list[int]], launcher: str,
                    quiet: bool) -> tuple[list[dict], dict]:
    """Preflight every host, take each node's inventory, and judge the set.

    Before anything launches: a host that does not answer or runs other
    versions is named (RunFailed, exit 1); a heterogeneous set is shown in
    one block; --strict refuses it, and a node that cannot run refuses always.
    """
    from bench.errors import RunFailed
    from bench.probe import local_inventory
    from bench.probe_cmd import probe_any, selected

    if launcher == "local":
        inv = local_inventory()
        inv.update(host="localhost", slots=resources["localhost"])
        nodes = [inv]
    else:
        from bench.preflight import check_or_raise
        if launcher != "slurm":
            # Slurm nodes are reached through srun; many clusters allow no ssh to them.
            check_or_raise(list(resources), timeout=15.0, container_exec=cfg.container_exec)
        nodes, unreachable = probe_any({"pdsh": "ssh"}.get(launcher, launcher), resources, 60.0,
                                       container_exec=cfg.container_exec)
        if unreachable:
            raise RunFailed("; ".join(f"probe: {h}: {why}" for h, why in unreachable.items()))
    return nodes, gate(cfg, [selected(n) for n in nodes], quiet)


def gate(cfg: RunConfig, nodes: list[dict], quiet: bool = False) -> dict:
    """The heterogeneity verdict of the selected GPUs, shown in one block; raises when refused."""
    from bench.errors import RunFailed
    from bench.hetero import verdict

    v = verdict(nodes, cfg.precision, cfg.micro_batch)
    shown = [f for f in v["findings"] if f["level"] in ("warn", "fail")]
    if (shown and not quiet) or v["level"] == "fail":
        print(f"bench: cluster verdict {v['level'].upper()} ({'uniform' if v['uniform'] else 'heterogeneous'}):",
              file=sys.stderr)
        for f in shown:
            print(f"  [{f['level']}] {f['code']}: {f['message']}", file=sys.stderr)
    if v["level"] == "fail":
        raise RunFailed("cluster verdict FAIL: a node cannot run this job (see above); nothing launched")
    if cfg.strict and (v["level"] != "ok" or not v["uniform"]):
        raise RunFailed("--strict: the cluster is not uniform (see above); nothing launched")
    return v


def check_precision(cfg: RunConfig, device: str) -> None:
    if device == "cpu" and cfg.precision == "fp16":
        raise BadInput("--precision fp16: DeepSpeed's CPU accelerator has no fp16 training; use bf16 or fp32 on CPU")


def run(cfg: RunConfig, args, *, dry_run: bool = False, quiet: bool = False, out_dir: str | None = None,
        extra: dict[str, Any] | None = None,
        inspected: tuple[list[dict], dict] | None = None) -> dict[str, Any] | None:
    """Plan, launch and record one run; returns its record (None for --dry-run).

    inspected: (inventory, verdict) already taken by the caller (bench validate
    probes once for all its runs), so this run does not reach the hosts again.
    """
    resources, slots_of, launcher, device = plan_resources(cfg, args)
    check_precision(cfg, device)
    world = sum(len(s) for s in resources.values())
    if cfg.dataset != "synthetic":
        from bench import datasets
        if cfg.download:
            datasets.fetch(cfg.dataset, cfg.data_dir)
        datasets.check_data_dir(cfg.dataset, cfg.data_dir)
    nominal_steps = cfg.steps or 50
    ds = dsconfig.build(cfg, world, nominal_steps)
    dsconfig.batch_sizes(ds, world)
    root = out_dir or cfg.out

    def build_launch(run_dir: str) -> launch.LaunchPlan:
        return launch.build(resources, launcher, run_dir, device, cfg.master_addr, cfg.master_port,
                            container_exec=cfg.container_exec)

    # Every refusal of the input comes before any host is reached or any run dir reserved.
    build_launch(os.path.join(root, "PENDING"))
    # A dry run reaches no host: it prints what would be launched.
    if inspected is not None:
        inventory, verdict = inspected
    else:
        inventory, verdict = ([], {}) if dry_run else inspect_cluster(cfg, resources, launcher, quiet)
    if verdict and launcher != "local" and cfg.device == "auto":
        # The compute nodes decide, not the (maybe GPU-less) node bench runs on.
        device = "cuda" if verdict["gpus"] else "cpu"
        check_precision(cfg, device)
    run_id = "DRY-RUN" if dry_run else results.new_run_id(root)
    run_dir = os.path.abspath(os.path.join(root, run_id))
    lp = build_launch(run_dir)
    plan = launch.plan_json(lp, resources, device, cfg.timeout)
    if dry_run:
        print(json.dumps({"config": cfg.to_dict(), "plan": plan, "deepspeed_config": ds,
                          "env_file": lp.env_file, "command": lp.shell()}, indent=2))
        return None

    if cfg.steps is None and cfg.epochs is None:
        cfg = cfg.replace(steps=nominal_steps)
    results.write_json_atomic(os.path.join(run_dir, "config.json"), cfg.to_dict())
    results.write_json_atomic(os.path.join(run_dir, "plan.json"), plan)
    results.write_json_atomic(os.path.join(run_dir, "ds_config.json"), ds)
    launch.write_files(lp, resources, slots_of)

    if device == "cpu" and not quiet:
        print(f"bench: no GPU: running on CPU with gloo, {world} rank(s)", file=sys.stderr)
    outcome: Outcome = execute(lp, run_dir, timeout=cfg.timeout, show_progress=not quiet)
    rec = record(cfg, plan, run_id, run_dir, outcome, {"inventory": inventory, "verdict": verdict, **(extra or {})})
    results.append(os.path.join(run_dir, "results.jsonl"), rec)
    if not quiet:
        from bench.tables import print_run
        from rich.console import Console
        print_run(rec, Console(stderr=False))
        print(f"results: {os.path.join(run_dir, 'results.jsonl')}", file=sys.stderr)
    return rec


def record(cfg: RunConfig, plan: dict, run_id: str, run_dir: str, outcome: Outcome,
           extra: dict[str, Any]) -> dict[str, Any]:
    from bench import figures, provenance

    summary = outcome.summary
    body: dict[str, Any] = {"run_id": run_id, "run_dir": run_dir, "config": cfg.to_dict(), "plan": plan,
                            "duration_s": outcome.duration_s, **extra}
    body["provenance"] = provenance.collect(plan, summary)
    if outcome.status == "ok" and summary is not None:
        body["figures"] = figures.from_summary(
            summary, micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum, planned_world=plan["world_size"],
            flops_per_image=summary.get("flops_per_image"), precision=cfg.precision)
        sanity = body["figures"]["sanity"]
        if not all(sanity.values()):
            body["warnings"] = [f"sanity: {k} is false" for k, v in sanity.items() if not v]
    else:
        body["error"] = outcome.error
    return results.make_record("run", outcome.status, **body)
