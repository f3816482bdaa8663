"""A training rank. Started by DeepSpeed's launcher (local, pdsh, openmpi or slurm) as

    python -u -m bench.worker --run-dir results/<run-id>

It reads the run's config.json and ds_config.json, logs to
logs/rank<R>.log, trains, and writes ranks/rank<R>.json; rank 0 gathers
every rank's figures and writes summary.json, which `bench run` turns into
the result record. Start and end: bench.worker.bootstrap.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from bench.core import provenance
from bench.core.config import RunConfig
from bench.core.results import write_json_atomic
from bench.core.storage import subdir
from bench.worker.bootstrap import env_rank, rank_main


def main(argv: list[str] | None = None) -> int:
    return rank_main("bench.worker", lambda run_dir, rank: f"OK: {run(run_dir)['images_per_s']:.1f} img/s", argv)


def run(run_dir: str) -> dict:
    """Train this rank's part of the run; in an independent run (plan.json "independent": bench validate's
    per-GPU runs) the rank trains alone in a world of one and writes alone/rank<R>.json, a summary of its own."""
    import torch

    from bench.core import datasets, models, parallel, synthetic
    from bench.worker import data as wdata
    from bench.worker import comm_counter, dist, flight, loop, memory, model_states, wire
    from bench.worker.engines import build_engine, create_model, settings

    cfg = RunConfig.load(os.path.join(run_dir, "config.json"))
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    with open(os.path.join(run_dir, "ds_config.json")) as f:
        ds_config = json.load(f)

    torch.manual_seed(cfg.seed)
    # Before the group exists: DeepSpeed binds its collectives when it starts (see comm_counter), and torch's
    # flight recorder reads its settings when a group is made (bench.worker.flight).
    flight.enable(run_dir)
    counter = comm_counter.install(plan["device"])
    independent = bool(plan.get("independent"))
    me = env_rank()  # the launcher's rank: in an independent run the group's is 0 for every rank
    # Both engines start their group through DeepSpeed: the DDP baseline then differs in the engine alone.
    world, rank, local_rank, device = dist.init(plan, via_deepspeed=True)

    # Data: each rank keeps only its own shard.
    if cfg.dataset == "synthetic":
        train_ds = synthetic.synthetic(cfg.synthetic_size, 10, seed=cfg.seed, split="train")
        test_ds = synthetic.synthetic(max(cfg.synthetic_size // 5, world), 10, seed=cfg.seed, split="test")
    else:
        train_ds = datasets.load(cfg.dataset, cfg.data_dir, "train", download=False)
        test_ds = datasets.load(cfg.dataset, cfg.data_dir, "test", download=False) if cfg.eval else None
    spec = models.resolve_model(cfg.model, cfg.img_size, train_ds.num_classes)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[cfg.precision]
    # The ranks of one data-parallel replica (pipeline stages, a tensor-parallel group) read the same batches.
    dp_rank, dp_world = parallel.data_rank(rank, world, cfg.tensor_parallel, cfg.pipeline_stages)
    common = dict(rank=dp_rank, world=dp_world, micro_batch=cfg.micro_batch, img_size=spec.img_size, device=device,
                  seed=cfg.seed, channels_last=cfg.channels_last, dtype=dtype)
    train_batches = wdata.make_batches(cfg.data_path, train_ds, train=True, fraction=cfg.dataset_fraction, **common)
    steps_per_epoch = max(train_batches.steps_per_epoch // cfg.grad_accum, 1)
    total_steps = cfg.steps if cfg.steps is not None else max(round(cfg.epochs * steps_per_epoch), 1)

    model = create_model(cfg, spec, train_ds.num_classes)
    # Counted on the whole CPU-built model: ZeRO-3 (engines.shard_zero3) and FSDP2 partition it next.
    n_params = sum(p.numel() for p in model.parameters())
    largest = max((sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()), default=0)
    flops_per_image = _train_flops(model, spec.img_size)  # before engines partition or free parameters
    if "scheduler" in ds_config and ds_config["scheduler"]["type"] == "WarmupCosineLR":
        ds_config["scheduler"]["params"]["total_num_steps"] = max(total_steps, cfg.warmup_steps + 1)
    engine = build_engine(cfg, model, ds_config, device)
    if getattr(engine, "tensor_parallel_group", None):  # its activation all-reduces, told apart (comm_counter)
        counter.label_group(engine.tensor_parallel_group, "tensor_parallel")
    if rank == 0:
        write_json_atomic(os.path.join(run_dir, "ds_config.json"), ds_config)

    if plan.get("start_barrier"):
        from bench.worker.barrier import wait
        waited = wait(run_dir, plan["start_barrier"], rank, entry=f"rank{me}" if independent else None)
        print(f"start barrier: waited {waited:.2f} s", flush=True)
    progress_path = os.path.join(run_dir, "progress.json")
    t_start = time.time()
    warm = min(cfg.timing_warmup, total_steps - 1)
    # The host's NIC / InfiniBand counters around the steady steps, read by one rank per host.
    host_wire = wire.Wire(counter.backend) if local_rank == 0 else None

    def on_step(step: int, times: loop.StepTimes) -> None:
        if host_wire is not None and step + 1 == warm:
            host_wire.start()
        if rank == 0 and (step % 5 == 0 or step + 1 == total_steps):
            write_json_atomic(progress_path, {"step": step + 1, "total": total_steps, "loss": times.loss[-1],
                                              "epoch": step // steps_per_epoch + 1,
                                              "epochs": -(-total_steps // steps_per_epoch),
                                              "elapsed_s": time.time() - t_start, "time": time.time()})

    states: list[dict] = []
    timing = dict(total_steps=total_steps, accum=cfg.grad_accum, device=device, on_step=on_step, counter=counter,
                  warmup_steps=warm, on_steady=lambda: memory.reset_peak(device))
    def measure() -> None:
        m = model_states.measure(engine.module, engine.optimizer)
        if cfg.offload == "nvme":
            m["by_device"]["nvme"] = model_states.swapped_bytes(cfg.nvme_path, rank)
        states.append(m)

    if host_wire is not None and warm == 0:
        host_wire.start()
    if cfg.pipeline_stages > 1:
        from bench.worker import pipeline
        times = pipeline.train(engine, train_batches, on_before_optimizer=measure, **timing)
    else:
        times = loop.train(engine, train_batches, on_last_step_backward=measure, **timing)
    mem = memory.snapshot(device)  # training's figure: before the test set and its activations are on the GPU
    if host_wire is not None:
        host_wire.stop()

    test = None
    if cfg.eval and test_ds is not None and cfg.pipeline_stages > 1:
        test = {"correct": None, "seen": None, "accuracy": None,
                "reason": "no test-set evaluation through pipeline stages"}
    elif cfg.eval and test_ds is not None:
        test_batches = wdata.make_batches("device", test_ds, train=False, **common)
        correct, seen = loop.evaluate(engine.module, test_batches, device)
        # A tensor-parallel group evaluates its replica's shard together: counted once, by its rank 0.
        counts = [correct, seen] if rank % cfg.tensor_parallel == 0 else [0, 0]
        t = torch.tensor(counts, dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        test = {"correct": int(t[0]), "seen": int(t[1]), "accuracy": float(t[0] / max(t[1], 1))}

    rec = rank_record(cfg, rank, local_rank, world, mem, times, steps_per_epoch)
    rec.update(total_steps=total_steps, model_states=model_states.peak(states), comm_steps=counter.per_step(),
               comm_timing=counter.timing_reason, comm_backend=counter.backend,
               wire=host_wire.result() if host_wire is not None else None, engine_settings=settings(engine),
               pipeline=getattr(engine, "pipeline_layout", None),
               tensor_parallel=getattr(engine, "tensor_parallel_layout", None))
    if independent:
        rec["rank"] = me
    write_json_atomic(os.path.join(run_dir, "ranks", f"rank{me if independent else rank}.json"), rec)

    def summary(ranks: list) -> dict:
        return {"world_size": world, "ranks": ranks, "test": test, "total_steps": total_steps,
                "steps_per_epoch": steps_per_epoch, "num_classes": train_ds.num_classes,
                "train_samples": train_batches.num_samples * dp_world,
                "model": {"timm_name": spec.timm_name, "img_size": spec.img_size, "params": n_params,
                          "largest_layer_params": largest, "sharded_from": getattr(engine, "sharded_from", None)},
                "deepspeed_estimate": deepspeed_estimate(cfg, plan, n_params, largest),
                "flops_per_image": flops_per_image,
                "versions": _versions(device)}

    if independent:
        write_json_atomic(os.path.join(subdir(run_dir, "alone"), f"rank{me}.json"), summary([rec]))
    else:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, rec)
        if rank == 0:
            write_json_atomic(os.path.join(run_dir, "summary.json"), summary(gathered))
    torch.distributed.barrier()
    if cfg.offload == "nvme":
        freed = model_states.remove_swap_files(cfg.nvme_path, rank)
        print(f"removed this rank's NVMe swap files: {freed / 2**20:.1f} MiB", flush=True)
    torch.distributed.destroy_process_group()
    return rec


def rank_record(cfg, rank, local_rank, world, mem, times, steps_per_epoch) -> dict:
    from bench.worker.bootstrap import THREADS
    from bench.worker.loop import epoch_walls, steady_window

    warm = min(cfg.timing_warmup, len(times.step) - 1)
    steady = slice(warm, None)
    step_s, skipped = steady_window(times, warm)
    images = cfg.micro_batch * cfg.grad_accum * len(step_s)
    return {
        "rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "pid": os.getpid(),
        "status": "ok",
        "images_per_s": images / sum(step_s),
        "warmup_steps": warm, "warmup_s": sum(times.step[:warm]),
        # Steps whose update fp16's loss scaler skipped train nothing: out of step_s, images/s and MFU.
        "steady_steps": len(step_s), "skipped_steps": len(skipped), "skipped_at": skipped,
        "steady_from": times.steady_from,
        "step_s": step_s,
        "epoch_wall_s": epoch_walls(times, steps_per_epoch),
        "parts_s": {k: sum(getattr(times, k)[steady]) / len(times.step[steady])
                    for k in ("data", "forward", "backward", "optimizer")} if times.forward else None,
        "loss": times.loss, "train_acc": times.acc or None,
        **({} if times.forward else pipeline_reasons()),
        **mem,
        "threads": dict(THREADS),
        # What this rank was given (the launching shell's environment may say otherwise): NCCL_*, GLOO_*, ...
        "env": provenance.allowed_env(),
    }


def pipeline_reasons() -> dict[str, str]:
    """Why a pipeline rank's record has no parts and no training accuracy (bench.worker.pipeline)."""
    from bench.worker.pipeline import ACC_REASON, PARTS_REASON
    return {"parts_reason": PARTS_REASON, "train_acc_reason": ACC_REASON}


def deepspeed_estimate(cfg, plan: dict, params: int, largest_layer: int) -> dict:
    """DeepSpeed's own model-state estimate per accelerator, for the ZeRO stages it ships an estimator for.

    estimate_zero2/3_model_states_mem_needs assume mixed-precision training
    on GPUs (2-byte parameters, fp32 master, gradients and Adam states); the
    record says so beside the figure.
    """
    if cfg.engine != "deepspeed" or cfg.zero_stage < 2:
        return {"bytes_per_rank": None, "reason": "DeepSpeed ships model-state estimators for its ZeRO-2 and ZeRO-3 "
                                                  "only"}
    if cfg.tensor_parallel > 1:
        return {"bytes_per_rank": None, "reason": "DeepSpeed's ZeRO estimators know no tensor parallelism"}
    counts = [len(s) for s in plan["resources"].values()]
    gpus_per_node, nodes = max(counts), len(counts)
    if cfg.zero_stage == 2:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        cpu, gpu = estimate_zero2_model_states_mem_needs(params, gpus_per_node, nodes, cpu_offload=bool(cfg.offload))
        call = "estimate_zero2_model_states_mem_needs"
    else:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(params, largest_layer, gpus_per_node, nodes,
                                                            cpu_offload=bool(cfg.offload),
                                                            cpu_offload_params=cfg.offload == "nvme")
        call = "estimate_zero3_model_states_mem_needs"
    return {"bytes_per_rank": int(gpu), "cpu_bytes_per_node": int(cpu), "how": f"deepspeed {call}", "reason":
            "DeepSpeed's estimate assumes mixed precision (2-byte weights, fp32 master, grads and Adam states)"}


def _train_flops(model, img_size: int) -> float | None:
    """Analytic training FLOPs per image for ViTs (None for other models)."""
    from bench.core import flops

    try:
        return float(flops.timm_vit_train_flops(model, img_size))
    except (AttributeError, TypeError, ValueError):
        return None


def _versions(device) -> dict:
    import deepspeed
    import timm
    import torch

    nccl = None
    if device.type == "cuda":
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - NCCL may be absent from a CPU build
            nccl = None
    return {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "timm": timm.__version__,
            "cuda": torch.version.cuda, "nccl": nccl, "python": sys.version.split()[0]}


if __name__ == "__main__":
    sys.exit(main())
