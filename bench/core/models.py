"""Model presets and name resolution, torch-free (bench.worker.engines builds the timm model).

Presets:
  vit-b16-224       the study's ViT-B/16 (12 layers, width 768, 12 heads,
                    ~86M parameters) on CIFAR upsampled to 224x224, with the
                    right number of classes (the study left timm's 1000-way
                    head on; we do not).
  vit-{tiny,small,base}-p4-32
                    CIFAR-native ViTs at 32x32 with 4x4 patches (64 tokens),
                    timm's tiny/small/base widths: fast runs on CPU or one GPU.
  vit-micro-p4-32   width 96, 4 blocks, 3 heads (~0.5M parameters): smoke
                    tests and CI on two CPU cores, where even tiny is slow.
  vit-micro-h4-p4-32
                    the same with 4 heads of 24: its heads and MLP width (384)
                    divide by 2 and 4, so --tensor-parallel 2 and 4 can split it.
  vit-l16-224       ViT-L/16 (24 layers, width 1024, 16 heads, 303M parameters
                    with a 10-way head) and
  vit-h14-224       ViT-H/14 (32 layers, width 1280, 16 heads, 631M): the
                    memory wall, where ZeRO, offload, FSDP2 and pipeline stages
                    decide whether a model trains at all (16 bytes of model
                    states per parameter: 4.9 GB and 10 GB before activations).
  vit-large-p4-32   ViT-L's width and depth at CIFAR's 32x32 (65 tokens, 303M
                    parameters): the same model states at a third of the
                    FLOPs of 224x224, for the memory suite on CPUs.
  vit-b16-384       ViT-B/16 at 384x384 (577 tokens) and
  vit-l16-384       ViT-L/16 at 384 (577 tokens), vit-l16-512 at 512 (1025
                    tokens): high resolution, where activations (quadratic in
                    the tokens in attention) and not the model states are the
                    wall, and tensor parallelism and checkpointing matter.
Any other name is passed to timm.create_model with --img-size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    timm_name: str
    img_size: int
    kwargs: dict[str, Any] = field(default_factory=dict)
    preset: str | None = None


PRESETS: dict[str, ModelSpec] = {
    "vit-b16-224": ModelSpec("vit_base_patch16_224", 224),
    "vit-tiny-p4-32": ModelSpec("vit_tiny_patch16_224", 32, {"patch_size": 4}),
    "vit-small-p4-32": ModelSpec("vit_small_patch16_224", 32, {"patch_size": 4}),
    "vit-base-p4-32": ModelSpec("vit_base_patch16_224", 32, {"patch_size": 4}),
    "vit-l16-224": ModelSpec("vit_large_patch16_224", 224),
    "vit-h14-224": ModelSpec("vit_huge_patch14_224", 224),
    "vit-large-p4-32": ModelSpec("vit_large_patch16_224", 32, {"patch_size": 4}),
    "vit-micro-p4-32": ModelSpec("vit_tiny_patch16_224", 32,
                                 {"patch_size": 4, "embed_dim": 96, "depth": 4, "num_heads": 3}),
    "vit-micro-h4-p4-32": ModelSpec("vit_tiny_patch16_224", 32,
                                    {"patch_size": 4, "embed_dim": 96, "depth": 4, "num_heads": 4}),
    "vit-b16-384": ModelSpec("vit_base_patch16_384", 384),
    "vit-l16-384": ModelSpec("vit_large_patch16_384", 384),
    "vit-l16-512": ModelSpec("vit_large_patch16_224", 512),
}


def _timm_names() -> set[str] | None:
    """timm's model names, read without importing torch (None if timm is absent)."""
    try:
        from importlib.metadata import files
        paths = files("timm") or []
    except Exception:
        return None
    # The registry needs torch to import; a name check by source text is enough
    # to reject typos in one line before any rank starts.
    names: set[str] = set()
    import re
    pat = re.compile(r"^def (\w+)\(pretrained(?::\s*bool)?\s*=", re.M)
    for p in paths:
        s = str(p)
        if s.startswith("timm/models/") and s.endswith(".py"):
            try:
                names.update(pat.findall(p.locate().read_text()))
            except OSError:
                continue
    return names or None


def resolve_model(name: str, img_size: int | None, num_classes: int) -> ModelSpec:
    """Preset or timm name -> ModelSpec; KeyError(one line) for an unknown name."""
    if name in PRESETS:
        spec = PRESETS[name]
        return ModelSpec(spec.timm_name, img_size or spec.img_size, dict(spec.kwargs), preset=name)
    known = _timm_names()
    if known is not None and name not in known:
        raise KeyError(f"unknown model {name!r}: not a preset ({', '.join(PRESETS)}) nor a timm model")
    return ModelSpec(name, img_size or 224, {})
