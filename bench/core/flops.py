"""Analytic FLOPs of a Vision Transformer, per image (see docs/metrics.md).

The numerator of MFU. Counted from the architecture, not measured, so the
figure does not depend on which attention kernel ran or whether a profiler
could see inside it.

    from bench.core.flops import vit_forward_flops, vit_train_flops
    vit_forward_flops(224, 16, 768, 12, 12, num_classes=1000)  # 35_127_656_448

Counted (2 FLOPs per multiply-add, N tokens, width D, MLP hidden H, patch P,
C input channels, K classes):

    patch embedding   2 * (N - prefix) * D * (C * P * P)
    per block:
      QKV projection  2 * N * D * 3D
      scores Q K^T    2 * N * N * D        (all heads together)
      weights @ V     2 * N * N * D
      out projection  2 * N * D * D
      MLP             2 * N * D * H * 2
    head              2 * D * K            (one pooled token)

Left out, as torch's FlopCounterMode also leaves them out: biases,
layernorms, softmax, GELU, the 1/sqrt(d) scale, residual and position-
embedding adds, pooling. For ViT-B/16 they are well under 1% of the total.
"""

from __future__ import annotations

from typing import Any


def _pair(name: str, value: int | tuple[int, int]) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and v >= 1 for v in pair):
        raise ValueError(f"{name}: expected a positive int or a pair of them, got {value!r}")
    return pair  # type: ignore[return-value]


def vit_forward_flops(
    img_size: int | tuple[int, int],
    patch: int | tuple[int, int],
    width: int,
    depth: int,
    heads: int,
    *,
    num_classes: int,
    mlp_ratio: float = 4.0,
    in_chans: int = 3,
    class_token: bool = True,
    reg_tokens: int = 0,
    mlp_hidden: int | None = None,
) -> int:
    """Forward FLOPs of one image through a ViT (2 FLOPs per multiply-add).

    Tokens N = (H/P_h)(W/P_w) patches + prefix tokens (class token and
    ``reg_tokens`` register tokens). The MLP hidden width is ``mlp_hidden``
    when given, else int(width * mlp_ratio), as timm builds it. ``heads`` does not change the
    count (the heads split D) but must divide ``width``. ``num_classes=0``
    means no head. See the module docstring for what is and is not counted.
    """
    h, w = _pair("img_size", img_size)
    ph, pw = _pair("patch", patch)
    if h % ph or w % pw:
        raise ValueError(f"img_size: {h}x{w} is not a multiple of patch {ph}x{pw}")
    for name, v in (("width", width), ("depth", depth), ("heads", heads), ("in_chans", in_chans)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
    if width % heads:
        raise ValueError(f"heads: {heads} does not divide width {width}")
    if not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes: must be an integer >= 0, got {num_classes!r}")
    if not isinstance(reg_tokens, int) or reg_tokens < 0:
        raise ValueError(f"reg_tokens: must be an integer >= 0, got {reg_tokens!r}")
    hidden = int(width * mlp_ratio) if mlp_hidden is None else mlp_hidden
    if not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"mlp_hidden: MLP width must be an integer >= 1, got {hidden!r}")

    patches = (h // ph) * (w // pw)
    n = patches + int(class_token) + reg_tokens
    d = width
    embed = 2 * patches * d * (in_chans * ph * pw)
    block = (
        2 * n * d * 3 * d  # qkv
        + 2 * n * n * d  # q @ k^T
        + 2 * n * n * d  # attn @ v
        + 2 * n * d * d  # proj
        + 2 * n * d * hidden * 2  # fc1 + fc2
    )
    head = 2 * d * num_classes
    return embed + depth * block + head


def vit_train_flops(*args: Any, **kwargs: Any) -> int:
    """Training FLOPs of one image: 3 x vit_forward_flops (same arguments).

    Every matmul Y = X W costs F forward and 2F backward (dX = dY W^T and
    dW = X^T dY), so a training step is forward + 2 x forward. Slight
    overcount: the patch embedding needs no gradient for its input image.
    Activation recomputation is not counted: this is model FLOPs, as MFU wants.
    """
    return 3 * vit_forward_flops(*args, **kwargs)


def timm_vit_config(model: Any, img_size: int | tuple[int, int] | None = None) -> dict[str, Any]:
    """vit_forward_flops keyword arguments read off a timm VisionTransformer.

    Reads patch_embed.{patch_size,img_size,proj.in_channels}, embed_dim,
    blocks (depth, num_heads, MLP width), num_prefix_tokens and num_classes;
    ``img_size`` overrides the model's (for dynamic-size models). Duck-typed,
    so it needs no torch or timm import. Models this count does not describe
    (attention-pool heads, gated MLPs, uneven blocks) raise ValueError.
    """
    try:
        blocks = list(model.blocks)
        # A gated MLP (timm's GluMlp, SwiGLU, SwiGLUPacked) multiplies two fc1 halves: fc1 is 2H wide but
        # fc2 reads H, so the count below would be a third too high. Refused, not guessed.
        gated = [type(b.mlp).__name__ for b in blocks
                 if hasattr(b.mlp, "fc1_g") or hasattr(b.mlp, "chunk_dim") or "glu" in type(b.mlp).__name__.lower()]
        if gated:
            raise ValueError(f"model: gated MLP ({gated[0]}) is not counted")
        pe = model.patch_embed
        width = int(model.embed_dim)
        prefix = int(model.num_prefix_tokens)
        num_classes = int(model.num_classes)
        in_chans = int(pe.proj.in_channels)
        patch = tuple(pe.patch_size)
        size = tuple(pe.img_size) if img_size is None else img_size
        shapes = {
            (b.attn.num_heads, b.attn.qkv.out_features, b.mlp.fc1.out_features) for b in blocks
        }
    except AttributeError as e:
        raise ValueError(f"model: not a timm VisionTransformer as expected ({e})") from None
    if getattr(model, "attn_pool", None) is not None:
        raise ValueError("model: attention-pool head (global_pool='map') is not counted")
    if len(shapes) != 1:
        raise ValueError(f"model: blocks differ in (heads, qkv, mlp) widths: {sorted(shapes)}")
    ((heads, qkv, hidden),) = shapes
    if qkv != 3 * width:
        raise ValueError(f"model: qkv width {qkv} is not 3 x embed_dim {width}")
    class_token = getattr(model, "cls_token", None) is not None
    return {
        "img_size": size,
        "patch": patch,
        "width": width,
        "depth": len(blocks),
        "heads": int(heads),
        "num_classes": num_classes,
        "mlp_hidden": int(hidden),
        "in_chans": in_chans,
        "class_token": class_token,
        "reg_tokens": prefix - int(class_token),
    }


def timm_vit_forward_flops(model: Any, img_size: int | tuple[int, int] | None = None) -> int:
    """Analytic forward FLOPs per image of a timm VisionTransformer instance."""
    return vit_forward_flops(**timm_vit_config(model, img_size))


def timm_vit_train_flops(model: Any, img_size: int | tuple[int, int] | None = None) -> int:
    """Analytic training FLOPs per image (3 x forward) of a timm ViT instance."""
    return 3 * timm_vit_forward_flops(model, img_size)
