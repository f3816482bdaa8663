"""bench's device data path against the DataLoader path: batch production alone, and the data share of a step.

    .venv/bin/python benchmarks/data_path.py                  # vit-tiny-p4-32, batch 32: ~2 min on 2 busy cores
    .venv/bin/python benchmarks/data_path.py --model vit-b16-224 --micro-batch 8   # upsampling to 224 (slow on CPU)

Both paths yield the same batches for the same seed (the test
tests/unit/test_worker_data.py::test_device_and_dataloader_give_identical_batches
holds them equal), so the difference is where and how they are made:
  device      the rank's shard stays a uint8 tensor on the device; crop, flip,
              normalise and upsampling are a few batched ops per step
  dataloader  torch DataLoader, 2 worker processes, one sample per __getitem__,
              collated, then copied to the device (pinned on CUDA)

Part 1, production alone: batches/s and images/s of one whole epoch of the
shard (the loader's worker start-up included, as in training), interleaved.
Part 2, in training: bench's engine and loop.train (the worker's path) run
blocks of steps from each path, interleaved; data share = the loop's data
part / its step time, over the steps after each block's first (whose data
part holds the loader's worker start-up, once an epoch in a real run).
The loader's workers also take CPU from the model's compute on a small
machine, which no data share shows: compare the step images/s too.
Passes when the device path's data share is under --max-share (2%).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

_common.pin_threads(1)
_common.single_rank_env()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit-tiny-p4-32")
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--shard", type=int, default=2048, help="training images in the rank's shard (synthetic)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per timed training block")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--max-share", type=float, default=0.02)
    # Two steps a block: the share is taken over the steps after a block's first.
    args = _common.parse_smoke(p, argv, dict(model="vit-micro-p4-32", micro_batch=4, shard=16, steps=2, rounds=1))

    import torch

    from bench.core import dsconfig, models, synthetic
    from bench.core.config import RunConfig
    from bench.worker import data as wdata
    from bench.worker import loop
    from bench.worker.engines import build_engine, create_model

    torch.set_num_threads(1)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    _common.init_distributed("nccl" if device.type == "cuda" else "gloo")
    cfg = RunConfig(model=args.model, dataset="synthetic", micro_batch=args.micro_batch, synthetic_size=args.shard,
                    steps=args.steps, timing_warmup=0)
    spec = models.resolve_model(cfg.model, None, 10)
    train_ds = synthetic.synthetic(cfg.synthetic_size, 10, seed=cfg.seed, split="train")
    common = dict(rank=0, world=1, micro_batch=cfg.micro_batch, img_size=spec.img_size, device=device,
                  seed=cfg.seed, dtype=torch.float32)
    paths = {kind: wdata.make_batches(kind, train_ds, **common) for kind in wdata.KINDS}
    print(f"# data_path: {_common.machine()}")
    print(f"# model {cfg.model} ({spec.timm_name} @ {spec.img_size}), micro batch {cfg.micro_batch}, shard "
          f"{args.shard} images ({paths['device'].steps_per_epoch} batches an epoch), 1 compute thread, "
          f"DataLoader workers {paths['dataloader'].num_workers}, device {device.type}")

    # --- part 1: production alone ------------------------------------------------
    epoch = {"n": 0}

    def produce(kind: str):
        def block() -> float:
            epoch["n"] += 1
            n = 0
            with _common.Timer(sync) as t:
                for x, _ in paths[kind].epoch(epoch["n"]):
                    n += x.shape[0]
            return n / t.seconds
        return block

    print("# part 1: batch production alone, images/s of one epoch")
    made = _common.interleave({k: produce(k) for k in wdata.KINDS}, args.rounds)

    # --- part 2: inside bench's training step -------------------------------------------
    ds = dsconfig.build(cfg, 1, args.steps)
    torch.manual_seed(cfg.seed)
    engine = build_engine(cfg, create_model(cfg, spec, 10), ds, device)
    shares: dict[str, list[float]] = {k: [] for k in wdata.KINDS}
    data_ms: dict[str, list[float]] = {k: [] for k in wdata.KINDS}

    def train(kind: str):
        def block() -> float:
            times = loop.train(engine, paths[kind], total_steps=args.steps, accum=1, device=device)
            data, step = times.data[1:], times.step[1:]
            shares[kind].append(sum(data) / sum(step))
            data_ms[kind].append(sum(data) / len(data) * 1e3)
            return len(step) * cfg.micro_batch / sum(step)
        return block

    print(f"# part 2: training steps (bench's engine and loop), images/s over steps 2..{args.steps} of a block")
    stepped = _common.interleave({k: train(k) for k in wdata.KINDS}, args.rounds)

    print("# result")
    for k in wdata.KINDS:
        print(f"  {k:>10}: production {_common.median(made[k]):9.1f} img/s; in training: data "
              f"{_common.median(data_ms[k]):6.2f} ms a step, share {_common.median(shares[k]) * 100:5.2f}%, "
              f"step {_common.median(stepped[k]):7.2f} img/s")
    print(f"  production ratio device/dataloader (median of paired rounds): "
          f"{_common.paired_ratio(made['device'], made['dataloader']):.2f}")
    print(f"  training ratio device/dataloader (median of paired rounds): "
          f"{_common.paired_ratio(stepped['device'], stepped['dataloader']):.3f}")
    share = _common.median(shares["device"])
    ok = share < args.max_share
    print(f"data_path: device data share {share * 100:.2f}% {'<' if ok else '>='} {args.max_share * 100:.0f}%: "
          f"{_common.verdict(ok, args.smoke)}")
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
