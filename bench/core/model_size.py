"""A ViT preset's shape and parameter count, torch-free: what bench knows of a model before any rank builds it.

    shape_of(resolve_model("vit-l16-224", None, 10))    # ViTShape(width=1024, depth=24, heads=16, ...)
    vit_params(shape_of(spec))                           # 303_311_882 (timm's own count, tested)

bench uses it before launching: to size the NVMe swap files of --offload
nvme, and for the memory formulas of a sweep's plan (the ranks still count
the parameters of the model they built, and the record keeps that count).
Per block, width D and MLP width H: two layer norms 4D, QKV 3D^2 + 3D,
projection D^2 + D, MLP 2DH + H + D; plus the patch embedding C P^2 D + D,
class token D, position embedding (N + 1) D, final norm 2D and the head
D K + K. Only timm's plain ViT (class token, no register tokens, ungated
MLP) is counted; other models give None.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.models import ModelSpec

# timm's ViT widths: (width, depth, heads) by the name's size word.
_SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16),
          "huge": (1280, 32, 16)}


@dataclass(frozen=True, slots=True)
class ViTShape:
    width: int
    depth: int
    heads: int
    patch: int
    img_size: int
    num_classes: int
    mlp_ratio: float = 4.0
    in_chans: int = 3

    @property
    def tokens(self) -> int:
        return (self.img_size // self.patch) ** 2 + 1


def shape_of(spec: ModelSpec, num_classes: int = 10) -> ViTShape | None:
    """The shape of a timm `vit_<size>_patch<P>_<res>` spec with its kwargs; None for any other model."""
    parts = spec.timm_name.split("_")
    if len(parts) != 4 or parts[0] != "vit" or parts[1] not in _SIZES or not parts[2].startswith("patch"):
        return None
    width, depth, heads = _SIZES[parts[1]]
    kw = spec.kwargs
    try:
        patch = int(kw.get("patch_size", parts[2][len("patch"):]))
    except ValueError:
        return None
    return ViTShape(width=int(kw.get("embed_dim", width)), depth=int(kw.get("depth", depth)),
                    heads=int(kw.get("num_heads", heads)), patch=patch, img_size=spec.img_size,
                    num_classes=num_classes, mlp_ratio=float(kw.get("mlp_ratio", 4.0)))


def vit_params(s: ViTShape) -> int:
    """Parameters of a timm ViT of shape s (weights and biases, embeddings, head)."""
    d, h = s.width, int(s.width * s.mlp_ratio)
    block = 4 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * h + h + d
    embed = s.in_chans * s.patch * s.patch * d + d + d + s.tokens * d
    head = 2 * d + d * s.num_classes + s.num_classes
    return embed + s.depth * block + head
