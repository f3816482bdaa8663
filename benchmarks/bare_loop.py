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
  timm   timm's benchmark.py train step (benchmarks/timm_train_bench.make_step:
         autocast, none in fp32, GradScaler, zero_grad) on the same model,
         optimizer and one batch: bench against timm's own way of timing a
         model, the comparison issue 31 asked for.
  --arm NAME:FIELD=VALUE,...  another bench arm with RunConfig fields changed
         (ds.KEY: a key of the generated DeepSpeed config; engine.ATTR: an
         attribute of the DeepSpeed engine), to find where a gap comes from.
Throughput is images over the wall clock of a whole block (both arms alike),
and images per second of this process's CPU time, which other work on the
same cores does not move. Passes when bench's median paired ratio to bare is
at least --threshold (0.95): in CPU time on CPU, in wall clock on a GPU.
The load average is printed beside every round and at the end.
--profile: cProfile one block of bench and of bare (3 times each) and list,
per step, the functions only bench's block calls: where its extra time goes.
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
    p.add_argument("--profile", action="store_true", help="list the functions only bench's step calls, per step")
    args = _common.parse_smoke(p, argv, dict(model="vit-micro-p4-32", micro_batch=4, steps=1, rounds=1,
                                             arm=["noclip:ds.gradient_clipping=0"], profile=True))

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
    _common.init_distributed("nccl" if device.type == "cuda" else "gloo")
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

    # timm's benchmark.py step on the same model (same seed), optimizer and first batch.
    from timm_train_bench import make_step
    torch.manual_seed(base.seed)
    timm_model = create_model(base, spec, 10).to(device)
    timm_opt = torch.optim.AdamW(timm_model.parameters(), lr=params["lr"], betas=tuple(params["betas"]),
                                 eps=params["eps"], weight_decay=params["weight_decay"], **dsconfig.adamw_impl(base.adamw))
    timm_model.train()
    timm_step = make_step(timm_model, timm_opt, fixed[0][0], fixed[0][1], "fp32", device)
    timm_cpu: list[float] = []

    def timm_block() -> float:
        with _common.Timer(sync) as t:
            for _ in range(args.steps):
                timm_step()
        timm_cpu.append(args.steps * args.micro_batch / t.cpu_seconds)
        return args.steps * args.micro_batch / t.seconds

    arms["timm"] = timm_block
    if args.profile:
        profile_only_bench(bench_block, bare_block, args.steps)
    print(f"# bench's DeepSpeed config: {json.dumps(ds, sort_keys=True)}")
    print("# images/s per block:")
    kept = _common.interleave(arms, args.rounds)

    print("# result")
    for name, xs in kept.items():
        print(f"  {name:>12}: median {_common.median(xs):8.2f} img/s  (min {min(xs):.2f}, max {max(xs):.2f})")
    t = bench_last["times"]
    n = len(t.step)
    parts = {k: sum(getattr(t, k)) / n * 1e3 for k in ("data", "forward", "backward", "optimizer")}
    step_ms = sum(t.step) / n * 1e3
    print("  bench's own parts, last block (ms/step): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
          + f"; step {step_ms:.1f}; loss {t.loss[-1]:.3f}")
    cpu_kept = {"bench": bench_last["cpu"][1:], "bare": bare_cpu[1:], "timm": timm_cpu[1:],
                **{n: v["cpu"][1:] for n, v in extra_last.items()}}
    for base_arm in ("bare", "timm"):
        for name in arms:
            if name not in ("bare", "timm") or (base_arm == "bare" and name == "timm"):
                r = _common.paired_ratio(kept[name], kept[base_arm])
                c = _common.paired_ratio(cpu_kept[name], cpu_kept[base_arm])
                print(f"  ratio {name}/{base_arm} (median of paired rounds): {r:.3f} wall clock, {c:.3f} CPU time")
    ratio = _common.paired_ratio(kept["bench"], kept["bare"])
    cpu_ratio = _common.paired_ratio(cpu_kept["bench"], cpu_kept["bare"])
    # On CPU the gate is on CPU time: other work on the same cores moves wall clock far more than 5%.
    gated = cpu_ratio if device.type == "cpu" else ratio
    ok = gated >= args.threshold
    print(f"  load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"bare_loop: bench/bare = {ratio:.3f} wall clock, {cpu_ratio:.3f} CPU time; "
          f"{'CPU time' if device.type == 'cpu' else 'wall clock'} {gated:.3f} {'>=' if ok else '<'} "
          f"{args.threshold}: {_common.verdict(ok, args.smoke)}")
    return 0 if ok or args.smoke else 1


def profile_only_bench(bench_block, bare_block, steps: int, repeats: int = 3, top: int = 20) -> None:
    """cProfile `repeats` blocks of each; print, per step, the functions only bench's block calls."""
    import cProfile
    import pstats

    def profile(block) -> dict:
        acc: dict = {}
        for _ in range(repeats):
            pr = cProfile.Profile()
            pr.enable()
            block()
            pr.disable()
            for key, (_cc, calls, self_s, cum_s, _callers) in pstats.Stats(pr).stats.items():
                a = acc.setdefault(key, [0.0, 0.0, 0])
                a[0], a[1], a[2] = a[0] + self_s, a[1] + cum_s, a[2] + calls
        return acc

    mine, theirs = profile(bench_block), profile(bare_block)
    only = {k: v for k, v in mine.items() if k not in theirs}
    per = repeats * steps
    print(f"# profile (self time per step, ms): bench {sum(v[0] for v in mine.values()) / per * 1e3:.1f}, bare "
          f"{sum(v[0] for v in theirs.values()) / per * 1e3:.1f}; functions only bench calls "
          f"{sum(v[0] for v in only.values()) / per * 1e3:.2f}, the largest:")
    for (path, line, fn), (self_s, cum_s, calls) in sorted(only.items(), key=lambda kv: -kv[1][1])[:top]:
        where = path.split("site-packages/")[-1].replace(_common.REPO + "/", "")
        print(f"  {cum_s / per * 1e3:8.3f} cum {self_s / per * 1e3:8.3f} self {calls // repeats:6d} calls  "
              f"{where}:{line}({fn})")


if __name__ == "__main__":
    sys.exit(main())
