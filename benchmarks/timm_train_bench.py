"""A minimal stand-in for timm's benchmark.py in train mode: one GPU, timm model, torch AMP, AdamW.

NOT timm's benchmark.py (that script lives in timm's repository, not in its
pip package, and nothing can be fetched here). It does what that script's
train mode does for a ViT: random input of the given batch, model in train
mode, autocast to bf16/fp16 (fp32 without), cross-entropy, backward,
optimizer step, timed after warm-up with a device sync at both ends.

    .venv/bin/python benchmarks/timm_train_bench.py --model vit_base_patch16_224 --img-size 224 --batch 256 --precision bf16
    .venv/bin/python benchmarks/timm_train_bench.py --model vit_tiny_patch16_224 --patch-size 4 --img-size 32 --batch 8 --steps 3 --device cpu

Prints one JSON line: images/s, TFLOP/s and MFU (bench/flops.py's count, the
peak from bench/gpus.py's table for the GPU torch reports), peak memory.
make_step() is the step itself: benchmarks/bare_loop.py's `timm` arm runs it
beside bench's loop, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def make_step(model, opt, x, y, precision: str, device):
    """One train-mode step as timm's benchmark.py takes it: autocast (none in fp32), loss, scaled backward,
    optimizer step, zero_grad; the same input every step. benchmarks/bare_loop.py's `timm` arm uses it too."""
    import torch
    import torch.nn.functional as F

    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--patch-size", type=int, default=None)
    p.add_argument("--embed-dim", type=int, default=None)
    p.add_argument("--depth", type=int, default=None)
    p.add_argument("--num-heads", type=int, default=None)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="bf16")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--device", default="cuda")
    # The smallest preset's shape (bench's vit-micro-p4-32), on the CPU so that it runs on any machine.
    args = _common.parse_smoke(p, argv, dict(model="vit_tiny_patch16_224", img_size=32, patch_size=4, embed_dim=96,
                                             depth=4, num_heads=3, batch=4, precision="fp32", steps=1, warmup=1,
                                             device="cpu"), banner=False)

    import timm
    import torch

    from bench.analysis import figures
    from bench.core import flops

    device = torch.device(args.device)
    kw = {k: v for k, v in (("patch_size", args.patch_size), ("embed_dim", args.embed_dim), ("depth", args.depth),
                            ("num_heads", args.num_heads)) if v}
    model = timm.create_model(args.model, pretrained=False, num_classes=args.num_classes, img_size=args.img_size,
                              **kw).to(device)
    f_train = flops.timm_vit_train_flops(model, args.img_size)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    step_model = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=True)
    x = torch.randn(args.batch, 3, args.img_size, args.img_size, device=device)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, args.num_classes, (args.batch,), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model.train()
    step = make_step(step_model, opt, x, y, args.precision, device)

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    sync()
    t = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    seconds = time.perf_counter() - t
    ips = args.steps * args.batch / seconds
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    bus = None
    if device.type == "cuda":  # the same figure bench's ranks record, so gpu-check can say both used one GPU
        props = torch.cuda.get_device_properties(device)
        bus = ":".join(f"{x:02x}" for x in (getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None))
                       if isinstance(x, int)) or None
    peak, why = figures.peak_flops_of(name, args.precision)
    print(json.dumps({
        "what": "timm_train_bench (a minimal equivalent of timm benchmark.py train mode, not timm's script)"
                + (f"; {_common.SMOKE_LINE}" if args.smoke else ""), "smoke": args.smoke,
        "model": args.model, "img_size": args.img_size, "batch": args.batch, "precision": args.precision,
        "device": name, "pci_bus_device": bus, "channels_last": args.channels_last, "compile": args.compile,
        "images_per_s": ips, "tflops": f_train * ips / 1e12, "mfu": f_train * ips / peak if peak else None,
        "mfu_reason": why, "flops_per_image": f_train,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
