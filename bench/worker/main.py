"""Rank entrypoint: the only code that imports torch, deepspeed and timm.

Started by DeepSpeed's launcher (local, pdsh, openmpi or slurm) as

    python -u -m bench.worker --run-dir results/<run-id>

It reads the run's config.json and ds_config.json, logs to
logs/rank<R>.log, trains, and writes ranks/rank<R>.json; rank 0 gathers
every rank's figures and writes summary.json, which `bench run` turns into
the result record. Results never travel through stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import socket
import sys
import time
import traceback

from bench.config import RunConfig
from bench.results import write_json_atomic

_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def env_rank() -> int:
    for name in _RANK_ENV:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def map_launcher_env(plan: dict) -> None:
    """Give torch.distributed its variables under mpirun and srun too.

    DeepSpeed's openmpi and slurm runners start the ranks without RANK,
    WORLD_SIZE, LOCAL_RANK and MASTER_ADDR; DeepSpeed would then discover
    them through mpi4py. Mapping them here needs no MPI in Python, and the
    rendezvous address is the one bench planned (--master-addr).
    """
    env = os.environ
    if "RANK" in env:
        return
    for rank, size, local in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                              ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")):
        if rank in env:
            env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"] = env[rank], env[size], env.get(local, "0")
            env.setdefault("MASTER_ADDR", plan["master_addr"])
            env.setdefault("MASTER_PORT", str(plan["master_port"]))
            return


def _redirect_output(run_dir: str, rank: int) -> None:
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    fd = os.open(os.path.join(run_dir, "logs", f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.worker")
    p.add_argument("--run-dir", required=True)
    args, _ = p.parse_known_args(argv)  # DeepSpeed's launcher may append --local_rank=N
    run_dir = args.run_dir
    rank = env_rank()
    _redirect_output(run_dir, rank)
    # The launcher stops ranks that outlive it by these PIDs, never by pattern.
    os.makedirs(os.path.join(run_dir, "ranks"), exist_ok=True)
    with open(os.path.join(run_dir, "ranks", f"pid-{rank}"), "w") as f:
        f.write(f"{socket.gethostname()} {os.getpid()}\n")
    image = os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")
    print(f"[{socket.gethostname()}:{rank}] worker pid {os.getpid()} starting"
          + (f" in container {image}" if image else ""), flush=True)
    try:
        rec = run(run_dir, rank)
    except BaseException as e:  # noqa: BLE001 - report every failure of this rank, then re-raise
        status = "oom" if _is_oom(e) else "failed"
        traceback.print_exc()
        write_json_atomic(os.path.join(run_dir, "ranks", f"rank{rank}.json"), {
            "rank": rank, "host": socket.gethostname(), "status": status,
            "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"})
        print(f"[{socket.gethostname()}:{rank}] is broken: {type(e).__name__}: {e}", flush=True)
        sys.stderr.flush()
        # Exit now, skipping interpreter shutdown: the destructors of a process
        # group whose peer died can block it for ever (seen with gloo), and the
        # launcher, and so the whole job, waits on this process.
        os._exit(3 if status == "oom" else 1)
    print(f"[{socket.gethostname()}:{rank}] is OK: {rec['images_per_s']:.1f} img/s", flush=True)
    return 0


def _is_oom(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}"
    return ("OutOfMemoryError" in text or "out of memory" in text
            or "can't allocate memory" in text or isinstance(e, MemoryError))


def _skip_shm_comm_build() -> None:
    """Do not JIT-build DeepSpeed's CPU shared-memory all-reduce op.

    DeepSpeed's TorchBackend compiles it at init_distributed (~30 s, and a
    shared build directory that concurrent runs rebuild in turn), yet only
    inference_all_reduce uses it: training all-reduces go through
    torch.distributed, so bench measures the same thing without it.
    """
    import importlib

    # Not `import deepspeed.comm.torch as m`: the package's `torch` attribute is
    # the torch library itself, which that form would bind instead.
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    ds_torch.build_shm_op = lambda: None


def run(run_dir: str, rank: int) -> dict:
    import torch
    import deepspeed

    from bench import datasets, models
    from bench.worker import data as wdata
    from bench.worker import loop

    cfg = RunConfig.load(os.path.join(run_dir, "config.json"))
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    with open(os.path.join(run_dir, "ds_config.json")) as f:
        ds_config = json.load(f)

    device_kind = plan["device"]
    map_launcher_env(plan)
    torch.manual_seed(cfg.seed)
    _skip_shm_comm_build()
    collective_timeout = datetime.timedelta(seconds=plan["collective_timeout_s"])
    # DeepSpeed's data-parallel group comes from new_group(), which takes torch's
    # module default (30 min), not the world group's timeout: without this a
    # rank blocked on a hung or cut-off peer waits half an hour.
    torch.distributed.distributed_c10d.default_pg_timeout = collective_timeout
    torch.distributed.distributed_c10d.default_pg_nccl_timeout = collective_timeout
    deepspeed.init_distributed(dist_backend="nccl" if device_kind == "cuda" else "gloo", timeout=collective_timeout)
    world = torch.distributed.get_world_size()
    rank = torch.distributed.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    if device_kind == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    # Data: each rank keeps only its own shard.
    if cfg.dataset == "synthetic":
        train_ds = datasets.synthetic(cfg.synthetic_size, 10, seed=cfg.seed, split="train")
        test_ds = datasets.synthetic(max(cfg.synthetic_size // 5, world), 10, seed=cfg.seed, split="test")
    else:
        train_ds = datasets.load(cfg.dataset, cfg.data_dir, "train", download=False)
        test_ds = datasets.load(cfg.dataset, cfg.data_dir, "test", download=False) if cfg.eval else None
    spec = models.resolve_model(cfg.model, cfg.img_size, train_ds.num_classes)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[cfg.precision]
    common = dict(rank=rank, world=world, micro_batch=cfg.micro_batch, img_size=spec.img_size, device=device,
                  seed=cfg.seed, channels_last=cfg.channels_last, dtype=dtype)
    train_batches = wdata.make_batches(cfg.data_path, train_ds, train=True, fraction=cfg.dataset_fraction, **common)
    steps_per_epoch = max(train_batches.steps_per_epoch // cfg.grad_accum, 1)
    total_steps = cfg.steps if cfg.steps is not None else max(round(cfg.epochs * steps_per_epoch), 1)

    model = models.create(spec, train_ds.num_classes)
    if cfg.activation_checkpointing and hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
    if cfg.compile:
        model = torch.compile(model)
    if "scheduler" in ds_config and ds_config["scheduler"]["type"] == "WarmupCosineLR":
        ds_config["scheduler"]["params"]["total_num_steps"] = max(total_steps, cfg.warmup_steps + 1)
    if cfg.engine == "ddp":
        from bench.worker.ddp import DDPEngine
        engine = DDPEngine(model, ds_config, device)
    else:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    if rank == 0:
        write_json_atomic(os.path.join(run_dir, "ds_config.json"), ds_config)

    progress_path = os.path.join(run_dir, "progress.json")
    t_start = time.time()

    def on_step(step: int, times: loop.StepTimes) -> None:
        if rank == 0 and (step % 5 == 0 or step + 1 == total_steps):
            write_json_atomic(progress_path, {"step": step + 1, "total": total_steps, "loss": times.loss[-1],
                                              "epoch": step // steps_per_epoch + 1,
                                              "epochs": -(-total_steps // steps_per_epoch),
                                              "elapsed_s": time.time() - t_start, "time": time.time()})

    times = loop.train(engine, train_batches, total_steps=total_steps, accum=cfg.grad_accum, device=device,
                       on_step=on_step)

    test = None
    if cfg.eval and test_ds is not None:
        test_batches = wdata.make_batches("device", test_ds, train=False, **common)
        correct, seen = loop.evaluate(engine.module, test_batches, device)
        t = torch.tensor([correct, seen], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        test = {"correct": int(t[0]), "seen": int(t[1]), "accuracy": float(t[0] / max(t[1], 1))}

    rec = rank_record(cfg, rank, local_rank, world, device, times, steps_per_epoch, train_ds, spec, engine)
    rec["total_steps"] = total_steps
    write_json_atomic(os.path.join(run_dir, "ranks", f"rank{rank}.json"), rec)

    gathered: list = [None] * world
    torch.distributed.all_gather_object(gathered, rec)
    if rank == 0:
        write_json_atomic(os.path.join(run_dir, "summary.json"), {
            "world_size": world, "ranks": gathered, "test": test, "total_steps": total_steps,
            "steps_per_epoch": steps_per_epoch, "num_classes": train_ds.num_classes,
            "train_samples": train_batches.num_samples * world,
            "model": {"timm_name": spec.timm_name, "img_size": spec.img_size,
                      "params": sum(p.numel() for p in engine.module.parameters())},
            "flops_per_image": _train_flops(engine.module, spec.img_size),
            "versions": _versions(device)})
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return rec


def rank_record(cfg, rank, local_rank, world, device, times, steps_per_epoch, train_ds, spec, engine) -> dict:
    import torch

    warm = min(cfg.timing_warmup, len(times.step) - 1)
    steady = slice(warm, None)
    step_s = times.step[steady]
    images = cfg.micro_batch * cfg.grad_accum * len(step_s)
    if device.type == "cuda":
        peak_mem = torch.cuda.max_memory_allocated(device)
        dev_name = torch.cuda.get_device_name(device)
    else:
        peak_mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        dev_name = "cpu"
    return {
        "rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "pid": os.getpid(),
        "device": dev_name, "status": "ok",
        "images_per_s": images / sum(step_s),
        "warmup_steps": warm, "warmup_s": sum(times.step[:warm]),
        "steady_steps": len(step_s),
        "step_s": step_s,
        "parts_s": {k: sum(getattr(times, k)[steady]) / len(step_s)
                    for k in ("data", "forward", "backward", "allreduce", "optimizer")},
        "loss": times.loss, "train_acc": times.acc,
        "peak_memory_bytes": int(peak_mem),
        "memory_kind": "device" if device.type == "cuda" else "rss",
    }


def _train_flops(model, img_size: int) -> float | None:
    """Analytic training FLOPs per image for ViTs (None for other models)."""
    from bench import flops

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
