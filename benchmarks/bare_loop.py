"""bench's training loop against a bare PyTorch loop: same timm model, same batches, one process, one thread.

    .venv/bin/python benchmarks/bare_loop.py                 # vit-tiny-p4-32, batch 32: ~2 min on 2 busy cores
    .venv/bin/python benchmarks/bare_loop.py --rounds 2 --steps 2 --model vit-micro-p4-32   # a quick look
    .venv/bin/python benchmarks/bare_loop.py --arm noclip:ds.gradient_clipping=0 --arm nobreakdown:breakdown=false

Arms, each built once and then timed in interleaved blocks (benchmarks/_common.py):
  bench  exactly the worker's path (bench/worker/main.py run()): RunConfig ->
         dsconfig.build -> deepspeed.initialize -> loop.train over DeviceBatches,
         with its syncs, per-step figures, DeepSpeed's wall-clock breakdown and
         gradient clipping at 1.0, as `bench run` runs it.
  bare   the same timm model (same seed) and torch.optim.AdamW with the same
         hyper-parameters and implementation (fused), over the same batch
         tensors (taken once from the same DeviceBatches, so it pays nothing
         for data): forward, cross_entropy, backward, step, zero_grad.
  --arm NAME:FIELD=VALUE,...  another bench arm with RunConfig fields changed
         (ds.KEY: a key of the generated DeepSpeed config; engine.ATTR: an
         attribute of the DeepSpeed engine), to find where a gap comes from.
Throughput is images over the wall clock of a whole block (both arms alike),
and images per second of this process's CPU time, which other work on the
same cores does not move. Passes when bench's median paired ratio to bare is
at least --threshold (0.95): in CPU time on CPU, in wall clock on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (pins threads before torch is imported)

_common.pin_threads(1)
_common.single_rank_env()


def parse_arm(text: str) -> tuple[str, dict, dict, dict]:
    """'name:field=value,ds.key=value,engine.attr=value' -> (name, RunConfig, DeepSpeed config, engine changes)."""
    name, _, spec = text.partition(":")
    changes: dict[str, dict] = {"cfg": {}, "ds": {}, "engine": {}}
    for item in filter(None, spec.split(",")):
        key, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        kind, _, attr = key.partition(".") if key.startswith(("ds.", "engine.")) else ("cfg", "", key)
        changes[kind][attr] = value
    return name, changes["cfg"], changes["ds"], changes["engine"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit-tiny-p4-32")
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per timed block")
    p.add_argument("--rounds", type=int, default=5, help="kept rounds (one warm-up round more)")
    p.add_argument("--threshold", type=float, default=0.95)
    p.add_argument("--arm", action="append", default=[], help="extra bench arm NAME:FIELD=VALUE,...")
    args = p.parse_args(argv)

    import deepspeed
    import torch
    import torch.nn.functional as F

    from bench.core import dsconfig, models, synthetic
    from bench.core.config import RunConfig
    from bench.worker import data as wdata
    from bench.worker import loop
    from bench.worker.engines import build_engine, create_model

    torch.set_num_threads(1)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")
    base = RunConfig(model=args.model, dataset="synthetic", micro_batch=args.micro_batch,
                     steps=args.steps * (args.rounds + 1), timing_warmup=0)
    spec = models.resolve_model(base.model, base.img_size, 10)
    train_ds = synthetic.synthetic(base.synthetic_size, 10, seed=base.seed, split="train")
    print(f"# bare_loop: {_common.machine()}")
    print(f"# model {base.model} ({spec.timm_name} @ {spec.img_size}), micro batch {args.micro_batch}, "
          f"{args.steps} steps a block, {args.rounds} rounds + 1 warm-up, 1 thread, device {device.type}")

    def make_bench_arm(cfg: RunConfig, ds_changes: dict, engine_changes: dict):
        ds = dsconfig.merge(dsconfig.build(cfg, 1, cfg.steps), ds_changes)
        batches = wdata.make_batches(cfg.data_path, train_ds, rank=0, world=1, micro_batch=cfg.micro_batch,
                                     img_size=spec.img_size, device=device, seed=cfg.seed,
                                     channels_last=cfg.channels_last, dtype=torch.float32)
        torch.manual_seed(cfg.seed)
        engine = build_engine(cfg, create_model(cfg, spec, 10), ds, device)
        for attr, value in engine_changes.items():
            setattr(engine, attr, value)
        last: dict = {"cpu": []}

        def block() -> float:
            with _common.Timer(sync) as t:
                times = loop.train(engine, batches, total_steps=args.steps, accum=1, device=device)
            last["times"] = times
            last["cpu"].append(args.steps * cfg.micro_batch / t.cpu_seconds)
            return args.steps * cfg.micro_batch / t.seconds
        return block, last, batches, ds

    bench_block, bench_last, batches, ds = make_bench_arm(base, {}, {})
    arms = {"bench": bench_block}
    extra_last = {}
    for text in args.arm:
        name, cfg_changes, ds_changes, engine_changes = parse_arm(text)
        arms[name], extra_last[name], _, _ = make_bench_arm(base.replace(**cfg_changes), ds_changes, engine_changes)

    # The bare loop: what a user writes, on the very tensors bench's first steps train on.
    fixed = [(x.clone(), y.clone()) for _, (x, y) in zip(range(args.steps), batches.epoch(0))]
    torch.manual_seed(base.seed)
    bare = create_model(base, spec, 10).to(device)
    params = ds["optimizer"]["params"]
    opt = torch.optim.AdamW(bare.parameters(), lr=params["lr"], betas=tuple(params["betas"]), eps=params["eps"],
                            weight_decay=params["weight_decay"], **dsconfig.adamw_impl(base.adamw))
    bare.train()

    bare_cpu: list[float] = []

    def bare_block() -> float:
        with _common.Timer(sync) as t:
            for x, y in fixed:
                loss = F.cross_entropy(bare(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        bare_cpu.append(args.steps * args.micro_batch / t.cpu_seconds)
        return args.steps * args.micro_batch / t.seconds

    arms["bare"] = bare_block
    print(f"# bench's DeepSpeed config: {json.dumps(ds, sort_keys=True)}")
    print("# images/s per block:")
    kept = _common.interleave(arms, args.rounds)

    print("# result")
    for name, xs in kept.items():
        print(f"  {name:>12}: median {_common.median(xs):8.2f} img/s  (min {min(xs):.2f}, max {max(xs):.2f})")
    t = bench_last["times"]
    n = len(t.step)
    parts = {k: sum(getattr(t, k)) / n * 1e3 for k in ("data", "forward", "backward", "allreduce", "optimizer")}
    step_ms = sum(t.step) / n * 1e3
    print("  bench's own parts, last block (ms/step): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
          + f"; step {step_ms:.1f}; loss {t.loss[-1]:.3f}")
    for name in arms:
        if name != "bare":
            r = _common.paired_ratio(kept[name], kept["bare"])
            print(f"  ratio {name}/bare (median of paired rounds): {r:.3f}")
    cpu_kept = {"bench": bench_last["cpu"][1:], "bare": bare_cpu[1:], **{n: v["cpu"][1:] for n, v in extra_last.items()}}
    for name in arms:
        if name != "bare":
            r = _common.paired_ratio(cpu_kept[name], cpu_kept["bare"])
            print(f"  ratio {name}/bare in images per CPU-second (median of paired rounds): {r:.3f}")
    ratio = _common.paired_ratio(kept["bench"], kept["bare"])
    cpu_ratio = _common.paired_ratio(cpu_kept["bench"], cpu_kept["bare"])
    # On CPU the gate is on CPU time: other work on the same cores moves wall clock far more than 5%.
    gated = cpu_ratio if device.type == "cpu" else ratio
    ok = gated >= args.threshold
    print(f"bare_loop: bench/bare = {ratio:.3f} wall clock, {cpu_ratio:.3f} CPU time; "
          f"{'CPU time' if device.type == 'cpu' else 'wall clock'} {gated:.3f} {'>=' if ok else '<'} "
          f"{args.threshold}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
