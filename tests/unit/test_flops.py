"""Analytic ViT FLOPs: hand counts, and agreement with torch's FLOP counter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.core.flops import (
    timm_vit_config,
    timm_vit_forward_flops,
    vit_forward_flops,
    vit_train_flops,
)

# ViT-B/16, 224 px, 1000 classes: N = 197, D = 768, H = 3072.
#   embed 2*196*768*768            =    231_211_008
#   block 2*197*768*2304           =    697_171_968  qkv
#         2 * 2*197*197*768        =    119_221_248  QK^T, AV
#         2*197*768*768            =    232_390_656  proj
#         2*197*768*3072*2         =  1_859_125_248  mlp
#         -> 2_907_909_120 x 12    = 34_894_909_440
#   head  2*768*1000               =      1_536_000
VIT_B16_FWD = 35_127_656_448

# CIFAR-native ViT: 32 px, patch 4 -> 64 patches, N = 65, D = 192, H = 768.
#   embed 2*64*192*48 = 1_179_648; block 60_752_640 x 12 = 729_031_680;
#   head 2*192*10 = 3_840.
VIT_CIFAR_FWD = 730_215_168


def test_hand_counts():
    assert vit_forward_flops(224, 16, 768, 12, 12, num_classes=1000) == VIT_B16_FWD
    assert vit_forward_flops(32, 4, 192, 12, 3, num_classes=10) == VIT_CIFAR_FWD
    assert vit_train_flops(224, 16, 768, 12, 12, num_classes=1000) == 3 * VIT_B16_FWD


def test_heads_do_not_change_the_count_and_no_head_means_no_head_flops():
    base = vit_forward_flops(224, 16, 768, 12, 12, num_classes=1000)
    assert vit_forward_flops(224, 16, 768, 12, 1, num_classes=1000) == base
    assert vit_forward_flops(224, 16, 768, 12, 12, num_classes=0) == base - 2 * 768 * 1000


def test_prefix_tokens_and_rectangles():
    one = vit_forward_flops((32, 64), (4, 8), 64, 1, 1, num_classes=0, class_token=False)
    # 8x8 = 64 patches, N = 64, H = 256
    n, d = 64, 64
    embed = 2 * 64 * d * 3 * 4 * 8
    block = 2 * n * d * 3 * d + 4 * n * n * d + 2 * n * d * d + 4 * n * d * 256
    assert one == embed + block
    more = vit_forward_flops((32, 64), (4, 8), 64, 1, 1, num_classes=0, reg_tokens=4)
    assert more > one


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"img_size": 30}, "not a multiple of patch"),
        ({"heads": 5}, "does not divide"),
        ({"depth": 0}, "depth"),
        ({"num_classes": -1}, "num_classes"),
        ({"mlp_hidden": 0}, "mlp_hidden"),
    ],
)
def test_invalid_input(kwargs, match):
    args = {"img_size": 32, "patch": 4, "width": 192, "depth": 12, "heads": 3, "num_classes": 10}
    with pytest.raises(ValueError, match=match):
        vit_forward_flops(**(args | kwargs))


@pytest.mark.process
def test_modules_import_no_torch():
    code = "import sys, bench.analysis.metrics, bench.core.flops, bench.analysis.paper; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _counted_forward_flops(model) -> int:
    """torch's FlopCounterMode over one batch-1 forward pass, unfused attention."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    # The CPU fused attention kernel is invisible to FlopCounterMode (it
    # reports 33.70 instead of 35.13 GFLOPs for ViT-B/16): count the matmuls.
    for block in model.blocks:
        block.attn.fused_attn = False
    model.eval()
    x = torch.randn(1, 3, *model.patch_embed.img_size)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


def test_vit_b16_agrees_with_torch_flop_counter():
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_base_patch16_224", pretrained=False)
    analytic = timm_vit_forward_flops(model)
    assert analytic == VIT_B16_FWD
    assert analytic == pytest.approx(_counted_forward_flops(model), rel=0.01)


def test_cifar_vit_agrees_with_torch_flop_counter():
    pytest.importorskip("timm")
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(
        img_size=32, patch_size=4, embed_dim=192, depth=12, num_heads=3, num_classes=10
    )
    analytic = timm_vit_forward_flops(model)
    assert analytic == VIT_CIFAR_FWD
    assert analytic == pytest.approx(_counted_forward_flops(model), rel=0.01)


def test_timm_config_reads_prefix_tokens_and_head():
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_small_patch16_224", reg_tokens=4, num_classes=100)
    cfg = timm_vit_config(model)
    assert (cfg["class_token"], cfg["reg_tokens"], cfg["num_classes"]) == (True, 4, 100)
    assert (cfg["width"], cfg["mlp_hidden"], cfg["depth"]) == (384, 1536, 12)
    assert timm_vit_config(model, img_size=96)["img_size"] == 96


def test_timm_attention_pool_is_refused():
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_tiny_patch16_224", global_pool="map")
    with pytest.raises(ValueError, match="attention-pool"):
        timm_vit_config(model)


@pytest.mark.parametrize("mlp_layer", ["GluMlp", "SwiGLUPacked", "SwiGLU"])
def test_timm_gated_mlp_is_refused_not_overcounted(mlp_layer):
    # fc1 of a GluMlp is 2H wide but fc2 reads H: counted as a plain MLP it would be a third too high.
    timm = pytest.importorskip("timm")
    from timm import layers

    model = timm.create_model("vit_tiny_patch16_224", mlp_layer=getattr(layers, mlp_layer),
                              **({"act_layer": "silu"} if mlp_layer != "GluMlp" else {}))
    with pytest.raises(ValueError, match=r"gated MLP \((GluMlp|SwiGLU)\) is not counted"):
        timm_vit_config(model)
