"""A training rank. Started by DeepSpeed's launcher (local, pdsh, openmpi or slurm) as

    python -u -m bench.worker --run-dir results/<run-id>

It reads the run's config.json and ds_config.json, logs to
logs/rank<R>.log, trains, and writes ranks/rank<R>.json; rank 0 gathers
every rank's figures and writes summary.json, which `bench run` turns into
the result record. Start and end: bench.worker.bootstrap.

run() reads as the rank's phases, one function each, in the order they run:

    rank = setup(run_dir)                    # config, flight recorder, comm counter, process group
    numerics.first(...); copies.run(...)     # validate's numerics job and copies first, where the plan asks
    data = load_data(rank)                   # this rank's shard, the model spec, the step count
    model, engine = build(rank, data)        # the timm model, its FLOPs, the engine that trains it
    trained = train(rank, data, engine)      # the timed loop (or pipeline), memory, the NIC counters; burn.run
    test = evaluate(rank, data, engine)      # test-set accuracy, counted once per replica
    report(rank, data, model, engine, trained, test)   # rank record, summary, teardown
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench.core.config import RunConfig
from bench.core.results import write_json_atomic
from bench.core.storage import subdir
from bench.worker.bootstrap import env_rank, rank_main


def main(argv: list[str] | None = None) -> int:
    return rank_main("bench.worker", lambda run_dir, rank: f"OK: {run(run_dir)['images_per_s']:.1f} img/s", argv)


@dataclass
class Rank:
    """Who this rank is in the run: its config, plan and place in the process group."""

    run_dir: str
    cfg: RunConfig
    plan: dict
    ds_config: dict
    counter: Any
    world: int
    rank: int
    local_rank: int
    device: Any
    me: int              # the launcher's rank: in an independent run the group's is 0 for every rank
    independent: bool


@dataclass
class Data:
    train_ds: Any
    test_ds: Any
    spec: Any
    common: dict
    train_batches: Any
    steps_per_epoch: int
    total_steps: int
    dp_world: int


@dataclass
class Model:
    params: int
    largest_layer: int
    flops_per_image: float | None


@dataclass
class Trained:
    times: Any
    mem: dict
    wire: Any
    states: list = field(default_factory=list)


def run(run_dir: str) -> dict:
    """Train this rank's part of the run; in an independent run (plan.json "independent": bench validate's
    per-GPU runs) the rank trains alone in a world of one and writes alone/rank<R>.json, a summary of its own."""
    rank = setup(run_dir)
    if rank.plan.get("numerics"):  # bench validate's numerics job first: its per-GPU checks in one launch
        from bench.worker import numerics

        numerics.first(run_dir, rank.me, rank.plan, rank.device, rank.local_rank)
    if rank.plan.get("copies"):  # and its copies: to and from the host, within memory (bench.worker.copies)
        from bench.worker.copies import run as copies
        copies(run_dir, rank.me, rank.plan, rank.device, rank.local_rank)
    data = load_data(rank)
    model, engine = build(rank, data)
    trained = train(rank, data, engine)
    if rank.plan.get("burn"):  # then every GPU of the node hot at once for a fixed time (bench.worker.burn)
        from bench.worker.burn import run as burn
        burn(run_dir, rank.me, rank.plan, engine, data.train_batches, rank.device, rank.local_rank, rank.cfg)
    test = evaluate(rank, data, engine)
    return report(rank, data, model, engine, trained, test)


def setup(run_dir: str) -> Rank:
    """The run's files read, the flight recorder and comm counter on, the process group made."""
    import torch

    from bench.worker import comm_counter, dist, flight

    cfg = RunConfig.load(os.path.join(run_dir, "config.json"))
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    with open(os.path.join(run_dir, "ds_config.json")) as f:
        ds_config = json.load(f)
    if plan.get("numerics"):
        # Before any CUDA matmul: the numerics job run first is deterministic only with a fixed cuBLAS workspace.
        from bench.worker.numerics import CUBLAS_WORKSPACE

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.manual_seed(cfg.seed)
    independent = bool(plan.get("independent"))
    me = env_rank()
    # Before the group exists: DeepSpeed binds its collectives when it starts (see comm_counter), and torch's
    # flight recorder reads its settings when a group is made (bench.worker.flight).
    flight.enable(run_dir, launcher_rank=me if independent else None)
    counter = comm_counter.install(plan["device"])
    # Both engines start their group through DeepSpeed: the DDP baseline then differs in the engine alone.
    world, rank, local_rank, device = dist.init(plan, via_deepspeed=True)
    return Rank(run_dir, cfg, plan, ds_config, counter, world, rank, local_rank, device, me, independent)


def load_data(r: Rank) -> Data:
    """This rank's shard of the training set (and the test set), the model spec and how many steps to run."""
    import torch

    from bench.core import datasets, models, parallel, synthetic
    from bench.worker import data as wdata

    cfg = r.cfg
    if cfg.dataset == "synthetic":
        train_ds = synthetic.synthetic(cfg.synthetic_size, 10, seed=cfg.seed, split="train")
        test_ds = synthetic.synthetic(max(cfg.synthetic_size // 5, r.world), 10, seed=cfg.seed, split="test")
    else:
        train_ds = datasets.load(cfg.dataset, cfg.data_dir, "train", download=False)
        test_ds = datasets.load(cfg.dataset, cfg.data_dir, "test", download=False) if cfg.eval else None
    spec = models.resolve_model(cfg.model, cfg.img_size, train_ds.num_classes)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[cfg.precision]
    # The ranks of one data-parallel replica (pipeline stages, a tensor-parallel group) read the same batches.
    dp_rank, dp_world = parallel.data_rank(r.rank, r.world, cfg.tensor_parallel, cfg.pipeline_stages)
    common = dict(rank=dp_rank, world=dp_world, micro_batch=cfg.micro_batch, img_size=spec.img_size,
                  device=r.device, seed=cfg.seed, channels_last=cfg.channels_last, dtype=dtype)
    train_batches = wdata.make_batches(cfg.data_path, train_ds, train=True, fraction=cfg.dataset_fraction, **common)
    steps_per_epoch = max(train_batches.steps_per_epoch // cfg.grad_accum, 1)
    total_steps = cfg.steps if cfg.steps is not None else max(round(cfg.epochs * steps_per_epoch), 1)
    return Data(train_ds, test_ds, spec, common, train_batches, steps_per_epoch, total_steps, dp_world)


def build(r: Rank, d: Data) -> tuple[Model, Any]:
    """The model (counted whole, on the CPU) and the engine that trains it; rank 0 writes the final DeepSpeed config."""
    from bench.worker.engines import build_engine, create_model
    from bench.worker.record import train_flops

    model = create_model(r.cfg, d.spec, d.train_ds.num_classes)
    # Counted on the whole CPU-built model: ZeRO-3 (engines.shard_zero3) and FSDP2 partition it next.
    counted = Model(params=sum(p.numel() for p in model.parameters()),
                    largest_layer=max((sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()),
                                      default=0),
                    flops_per_image=train_flops(model, d.spec.img_size))  # before engines partition or free them
    ds_config = r.ds_config
    if "scheduler" in ds_config and ds_config["scheduler"]["type"] == "WarmupCosineLR":
        ds_config["scheduler"]["params"]["total_num_steps"] = max(d.total_steps, r.cfg.warmup_steps + 1)
    engine = build_engine(r.cfg, model, ds_config, r.device)
    if getattr(engine, "tensor_parallel_group", None):  # its activation all-reduces, told apart (comm_counter)
        r.counter.label_group(engine.tensor_parallel_group, "tensor_parallel")
    if r.rank == 0:
        write_json_atomic(os.path.join(r.run_dir, "ds_config.json"), ds_config)
    return counted, engine


def train(r: Rank, d: Data, engine) -> Trained:
    """The start barrier, then the timed loop (or DeepSpeed's pipeline schedule), with progress for bench's
    watchdog, the model states measured at the last step, memory and the host's NIC counters around it."""
    from bench.worker import loop, memory, model_states, wire

    from bench.worker.bootstrap import mark_started, progress

    cfg = r.cfg
    mark_started(r.run_dir, r.me)
    if r.plan.get("start_barrier"):
        from bench.worker.barrier import wait
        waited = wait(r.plan["start_barrier"], r.rank, per_rank=r.independent)
        print(f"start barrier: waited {waited:.2f} s", flush=True)
    t_start = time.time()
    warm = min(cfg.timing_warmup, d.total_steps - 1)
    # The host's NIC / InfiniBand counters around the steady steps, read by one rank per host.
    host_wire = wire.Wire(r.counter.backend) if r.local_rank == 0 else None

    def on_step(step: int, times: loop.StepTimes) -> None:
        if host_wire is not None and step + 1 == warm:
            host_wire.start()
        if r.rank == 0 and (step % 5 == 0 or step + 1 == d.total_steps):
            progress(r.run_dir, {"step": step + 1, "total": d.total_steps, "loss": times.loss[-1],
                                 "epoch": step // d.steps_per_epoch + 1,
                                 "epochs": -(-d.total_steps // d.steps_per_epoch),
                                 "elapsed_s": time.time() - t_start, "time": time.time()})

    states: list[dict] = []

    def measure() -> None:
        m = model_states.measure(engine.module, engine.optimizer)
        if cfg.offload == "nvme":
            m["by_device"]["nvme"] = model_states.swapped_bytes(cfg.nvme_path, r.rank)
        states.append(m)

    timing = dict(total_steps=d.total_steps, accum=cfg.grad_accum, device=r.device, on_step=on_step,
                  counter=r.counter, warmup_steps=warm, on_steady=lambda: memory.reset_peak(r.device))
    if host_wire is not None and warm == 0:
        host_wire.start()
    if cfg.pipeline_stages > 1:
        from bench.worker import pipeline
        times = pipeline.train(engine, d.train_batches, on_before_optimizer=measure, **timing)
    else:
        times = loop.train(engine, d.train_batches, on_last_step_backward=measure, **timing)
    mem = memory.snapshot(r.device)  # training's figure: before the test set and its activations are on the GPU
    if host_wire is not None:
        host_wire.stop()
    return Trained(times, mem, host_wire, states)


def evaluate(r: Rank, d: Data, engine) -> dict | None:
    """Test-set accuracy over every replica's shard (None without --eval)."""
    import torch

    from bench.worker import data as wdata
    from bench.worker import loop

    cfg = r.cfg
    if not (cfg.eval and d.test_ds is not None):
        return None
    if cfg.pipeline_stages > 1:
        return {"correct": None, "seen": None, "accuracy": None,
                "reason": "no test-set evaluation through pipeline stages"}
    test_batches = wdata.make_batches("device", d.test_ds, train=False, **d.common)
    correct, seen = loop.evaluate(engine.module, test_batches, r.device)
    # A tensor-parallel group evaluates its replica's shard together: counted once, by its rank 0.
    counts = [correct, seen] if r.rank % cfg.tensor_parallel == 0 else [0, 0]
    t = torch.tensor(counts, dtype=torch.float64, device=r.device)
    torch.distributed.all_reduce(t)
    return {"correct": int(t[0]), "seen": int(t[1]), "accuracy": float(t[0] / max(t[1], 1))}


def report(r: Rank, d: Data, model: Model, engine, trained: Trained, test: dict | None) -> dict:
    """This rank's record, the run's summary (rank 0, or each rank of an independent run), then the teardown."""
    import torch

    from bench.worker import model_states
    from bench.worker.engines import settings
    from bench.worker.record import deepspeed_estimate, rank_record, versions

    cfg, counter, wire = r.cfg, r.counter, trained.wire
    rec = rank_record(cfg, r.rank, r.local_rank, r.world, trained.mem, trained.times, d.steps_per_epoch)
    rec.update(total_steps=d.total_steps, model_states=model_states.peak(trained.states),
               comm_steps=counter.per_step(), comm_timing=counter.timing_reason, comm_backend=counter.backend,
               wire=wire.result() if wire is not None else None, engine_settings=settings(engine),
               pipeline=getattr(engine, "pipeline_layout", None),
               tensor_parallel=getattr(engine, "tensor_parallel_layout", None))
    if r.independent:
        rec["rank"] = r.me
    write_json_atomic(os.path.join(r.run_dir, "ranks", f"rank{r.me if r.independent else r.rank}.json"), rec)

    def summary(ranks: list) -> dict:
        return {"world_size": r.world, "ranks": ranks, "test": test, "total_steps": d.total_steps,
                "steps_per_epoch": d.steps_per_epoch, "num_classes": d.train_ds.num_classes,
                "train_samples": d.train_batches.num_samples * d.dp_world,
                "model": {"timm_name": d.spec.timm_name, "img_size": d.spec.img_size, "params": model.params,
                          "largest_layer_params": model.largest_layer,
                          "sharded_from": getattr(engine, "sharded_from", None)},
                "deepspeed_estimate": deepspeed_estimate(cfg, r.plan, model.params, model.largest_layer),
                "flops_per_image": model.flops_per_image,
                "versions": versions(r.device)}

    if r.independent:
        write_json_atomic(os.path.join(subdir(r.run_dir, "alone"), f"rank{r.me}.json"), summary([rec]))
    else:
        gathered: list = [None] * r.world
        torch.distributed.all_gather_object(gathered, rec)
        if r.rank == 0:
            write_json_atomic(os.path.join(r.run_dir, "summary.json"), summary(gathered))
    torch.distributed.barrier()
    if cfg.offload == "nvme":
        freed = model_states.remove_swap_files(cfg.nvme_path, r.rank)
        print(f"removed this rank's NVMe swap files: {freed / 2**20:.1f} MiB", flush=True)
    torch.distributed.destroy_process_group()
    return rec


if __name__ == "__main__":
    sys.exit(main())
