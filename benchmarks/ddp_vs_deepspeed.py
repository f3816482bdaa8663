"""2-rank DeepSpeed against PyTorch DDP on CPU (gloo): same model, batch and data, in the same two processes.

    .venv/bin/python benchmarks/ddp_vs_deepspeed.py          # starts itself under torchrun, 2 ranks x 1 thread; ~3 min
    .venv/bin/python benchmarks/ddp_vs_deepspeed.py --arms ddp,ds-plain --rounds 2   # a quick look

The default workload is ENVIRONMENT.md's: timm ViT-S/16 at 64x64 (22M
parameters), micro batch 32 per rank, 10 classes, AdamW lr 1e-4, weight
decay 0.05, gradient clipping 1.0 in every arm (bench's training semantics).
Arms, all built once in both ranks and timed in interleaved blocks:
  ddp         DistributedDataParallel + torch.optim.AdamW as a user writes it
              (torch's default implementation: a per-tensor loop on CPU)
  ddp-fused   the same with AdamW(fused=True): the stronger baseline
  ds-plain    DeepSpeed ZeRO-0 as a new user writes the config: batch, AdamW
              (torch_adam, so no 40 s JIT build, same implementation as ddp),
              gradient_clipping; nothing else
  z0, z0-quiet, z1, z2, z2-overlap
              bench's own path: RunConfig -> dsconfig.build -> deepspeed.initialize
              -> loop.train over DeviceBatches (the worker's code), with bench's
              defaults (fused AdamW, wall-clock breakdown) and ZeRO stage 0,
              0 without the breakdown (--no-breakdown), 1, 2, 2 + overlap_comm
Throughput: 2 ranks x batch x steps / the slower rank's block wall clock.
Passes when the best bench arm reaches at least --threshold (1.0) of ddp.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

_common.pin_threads(1)

BENCH_ARMS = {
    "z0": dict(zero_stage=0),
    "z0-quiet": dict(zero_stage=0, breakdown=False),
    "z1": dict(zero_stage=1),
    "z2": dict(zero_stage=2),
    "z2-overlap": dict(zero_stage=2, overlap_comm=True),
}
ALL_ARMS = ("ddp", "ddp-fused", "ds-plain", *BENCH_ARMS)


def parse(worker: bool) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_small_patch16_224", help="preset or timm name")
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=2, help="optimizer steps per timed block")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--arms", default="ddp,ddp-fused,ds-plain,z0,z0-quiet")
    p.add_argument("--threshold", type=float, default=1.0)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return _common.parse_smoke(p, None, dict(model="vit-micro-p4-32", img_size=32, micro_batch=4, steps=1, rounds=1,
                                             arms=",".join(ALL_ARMS)), banner=not worker)


def launch() -> int:
    """Re-run this file under torchrun: 2 ranks on this node; exit 1 when rank 0's verdict is FAIL."""
    import tempfile

    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            os.path.abspath(__file__), "--worker", *sys.argv[1:]]
    print("# " + " ".join(argv), flush=True)
    with tempfile.NamedTemporaryFile("r", suffix=".verdict") as verdict:
        rc = subprocess.run(argv, env={**os.environ, "DDP_VS_DS_VERDICT": verdict.name}).returncode
        return rc or (1 if verdict.read().strip() == "FAIL" else 0)  # a smoke run writes no verdict


def worker(args: argparse.Namespace) -> int:
    import deepspeed
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from bench.core import dsconfig, models, synthetic
    from bench.core.config import RunConfig
    from bench.worker import data as wdata
    from bench.worker import loop
    from bench.worker.engines import build_engine, create_model

    torch.set_num_threads(1)
    _common.init_distributed("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    device = torch.device("cpu")
    say = print if rank == 0 else (lambda *a, **k: None)
    arms_wanted = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms_wanted) - set(ALL_ARMS))
    if unknown:
        say(f"--arms: unknown {', '.join(unknown)} (choose from {', '.join(ALL_ARMS)})")
        return 2
    base = RunConfig(model=args.model, img_size=args.img_size, dataset="synthetic", micro_batch=args.micro_batch,
                     steps=args.steps, timing_warmup=0, synthetic_size=2048)
    spec = models.resolve_model(base.model, base.img_size, 10)
    train_ds = synthetic.synthetic(base.synthetic_size, 10, seed=base.seed, split="train")
    batches = wdata.make_batches("device", train_ds, rank=rank, world=world, micro_batch=base.micro_batch,
                                 img_size=spec.img_size, device=device, seed=base.seed)
    fixed = [(x.clone(), y.clone()) for _, (x, y) in zip(range(args.steps), batches.epoch(0))]
    hyper = dict(lr=base.lr, weight_decay=base.weight_decay, betas=(0.9, 0.999), eps=1e-8)
    say(f"# ddp_vs_deepspeed: {_common.machine()}")
    say(f"# {world} ranks x 1 thread, gloo; model {spec.timm_name} @ {spec.img_size}, micro batch "
        f"{base.micro_batch} per rank, {args.steps} steps a block, {args.rounds} rounds + 1 warm-up")

    def fresh_model():
        torch.manual_seed(base.seed)
        return create_model(base, spec, 10)

    def timed(run_block):
        def block() -> float:
            with _common.Timer() as t:
                run_block()
            slowest = torch.tensor([t.seconds], dtype=torch.float64)
            torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX)
            return world * base.micro_batch * args.steps / float(slowest)
        return block

    def ddp_arm(fused: bool):
        ddp = DistributedDataParallel(fresh_model())
        opt = torch.optim.AdamW(ddp.parameters(), **hyper, **({"fused": True} if fused else {}))

        def run() -> None:
            for x, y in fixed:
                loss = F.cross_entropy(ddp(x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
        return timed(run)

    def ds_plain_arm():
        model = fresh_model()
        config = {"train_micro_batch_size_per_gpu": base.micro_batch, "gradient_clipping": 1.0,
                  "optimizer": {"type": "AdamW", "params": {"lr": base.lr, "weight_decay": base.weight_decay,
                                                            "torch_adam": True}}}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

        def run() -> None:
            for x, y in fixed:
                loss = F.cross_entropy(engine(x), y)
                engine.backward(loss)
                engine.step()
        return timed(run)

    configs: dict[str, dict] = {}

    def bench_arm(name: str):
        cfg = base.replace(**BENCH_ARMS[name])
        ds = dsconfig.build(cfg, world, args.steps)
        configs[name] = ds
        engine = build_engine(cfg, fresh_model(), ds, device)
        return timed(lambda: loop.train(engine, batches, total_steps=args.steps, accum=1, device=device))

    makers = {"ddp": lambda: ddp_arm(False), "ddp-fused": lambda: ddp_arm(True), "ds-plain": ds_plain_arm}
    arms = {name: (makers[name]() if name in makers else bench_arm(name)) for name in arms_wanted}
    for name, ds in configs.items():
        say(f"# {name}: bench options {BENCH_ARMS[name]} -> zero_optimization {ds['zero_optimization']}")
    say("# images/s (both ranks) per block:")
    kept = _common.interleave(arms, args.rounds, log=say)

    say("# result")
    for name, xs in kept.items():
        say(f"  {name:>10}: median {_common.median(xs):7.2f} img/s  (min {min(xs):.2f}, max {max(xs):.2f})")
    ok = True
    if "ddp" in kept:
        for name in kept:
            if name != "ddp":
                say(f"  ratio {name}/ddp (median of paired rounds): {_common.paired_ratio(kept[name], kept['ddp']):.3f}")
        if "ddp-fused" in kept:
            for name in (n for n in kept if n in BENCH_ARMS):
                say(f"  ratio {name}/ddp-fused: {_common.paired_ratio(kept[name], kept['ddp-fused']):.3f}")
        bench_names = [n for n in kept if n in BENCH_ARMS]
        if bench_names:
            best = max(bench_names, key=lambda n: _common.paired_ratio(kept[n], kept["ddp"]))
            r = _common.paired_ratio(kept[best], kept["ddp"])
            ok = r >= args.threshold
            say(f"ddp_vs_deepspeed: best bench config {best} / ddp = {r:.3f} {'>=' if ok else '<'} "
                f"{args.threshold}: {_common.verdict(ok, args.smoke)}")
    if rank == 0 and os.environ.get("DDP_VS_DS_VERDICT") and not args.smoke:
        with open(os.environ["DDP_VS_DS_VERDICT"], "w") as f:
            f.write("PASS" if ok else "FAIL")
    torch.distributed.barrier()
    return 0  # a FAIL is a measurement, not a crashed rank: torchrun would report it as one


if __name__ == "__main__":
    a = parse("--worker" in sys.argv)
    sys.exit(worker(a) if a.worker else launch())
