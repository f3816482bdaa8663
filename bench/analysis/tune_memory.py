"""What one rank must hold for a training strategy, predicted before anything runs (bench tune's pruning).

    dims = vit_dims("vit-b16-224", None, 10)        # params, depth, width, heads, tokens; None: not a ViT we know
    model_state_bytes(86e6, n=8, stage=2, precision="bf16", offload=False)   # the ZeRO paper's formula, by category
    activation_bytes(dims, micro_batch=64, precision="bf16")                 # Korthikanti et al.'s per-layer count
    predict(dims, n=8, stage=2, precision="bf16", offload=False, micro_batch=64, gpus_per_node=8, nodes=1)

Model states (Rajbhandari et al., ZeRO, SC'20, section 3.1), Psi parameters,
N data-parallel ranks, Adam:

    mixed precision (fp16/bf16):  2 Psi weights + 2 Psi gradients + 12 Psi optimizer (fp32 master 4 + momentum 4
                                  + variance 4)  = 16 Psi bytes without ZeRO
    fp32:                         4 Psi weights + 4 Psi gradients +  8 Psi optimizer (momentum 4 + variance 4)
                                                 = 16 Psi bytes without ZeRO
    ZeRO-1 divides the optimizer term by N, ZeRO-2 also the gradients, ZeRO-3 also the weights.
    Offload (ZeRO-Offload) moves the optimizer term (and ZeRO-2/3's fp32 gradient copy) to host memory.

Activations per sample and transformer block (Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models", 2022, eq. 1, no
tensor parallelism, no recomputation): s h (34 + 5 a s / h) bytes with 16-bit
activations, s tokens, h width, a heads; twice that in fp32. With activation
checkpointing a block keeps only its 2 s h input bytes (16-bit), plus one
block's full set during its recomputation.

DeepSpeed ships its own estimators (deepspeed.runtime.zero
estimate_zero2/3_model_states_mem_needs); deepspeed_estimate() is their
formula, written out here so bench (torch-free) can show it beside ours. It
assumes mixed precision. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.analysis.volume import model_state_formula, tensor_parallel_local_params
from bench.core.model_size import shape_of, vit_params
from bench.core.models import resolve_model

# A prediction must leave this share of the smallest GPU free for the CUDA context and allocator slack.
HEADROOM = 0.10


@dataclass(frozen=True, slots=True)
class VitDims:
    params: int
    depth: int
    width: int
    heads: int
    tokens: int
    """patches + the class token."""
    largest_layer: int
    """parameters of the largest single layer (ZeRO-3's gather buffer): the MLP's fc1."""
    split_params: int = 0
    """parameters tensor parallelism splits T ways (qkv, fc1 with biases; proj, fc2 weights), all blocks."""


def vit_dims(model: str, img_size: int | None, classes: int) -> VitDims | None:
    """The dimensions of a preset or timm ViT name; None for a model this module has no formula for."""
    try:
        spec = resolve_model(model, img_size, classes)
    except KeyError:
        return None
    shape = shape_of(spec, classes)  # bench.core.model_size: the one parameter count
    if shape is None:
        return None
    w, h = shape.width, int(shape.width * shape.mlp_ratio)
    return VitDims(params=vit_params(shape), depth=shape.depth, width=w, heads=shape.heads, tokens=shape.tokens,
                   largest_layer=4 * w * w + 4 * w, split_params=shape.depth * (4 * w * w + 3 * w + 2 * w * h + h))


def model_state_bytes(params: float, n: int, stage: int, precision: str, offload: bool = False) -> dict[str, float]:
    """Bytes per rank of weights, gradients and optimizer states (module docstring), and where they live."""
    if n < 1 or stage not in (0, 1, 2, 3):
        raise ValueError(f"need n >= 1 and a stage 0-3, got n={n}, stage={stage}")
    mixed = precision in ("fp16", "bf16")
    f = model_state_formula(params, n, stage, precision)  # the ZeRO paper's, written once (analysis.volume)
    weights, grads, optimizer = f["params"], f["grads"], f["master_params"] + f["optimizer_states"]
    w_b, g_b, k = (2, 2, 12) if mixed else (4, 4, 8)
    host = 0.0
    if offload:
        host, optimizer = optimizer, 0.0
        if stage >= 2 and mixed:
            host += 4 * params / n      # the fp32 gradient partition the CPU optimizer steps on
    device = weights + grads + optimizer
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "device": device, "host": host,
            "bytes_per_param_unsharded": float(w_b + g_b + k)}


def activation_bytes(dims: VitDims, micro_batch: int, precision: str, checkpointing: bool = False,
                     tensor: int = 1) -> float:
    """Activations kept for backward by one rank at this micro batch (module docstring); with T-way tensor
    parallelism (no sequence parallelism) Korthikanti et al.'s eq. 2: s h (10 + 24/T + 5 a s / (h T))."""
    s, h, a = dims.tokens, dims.width, dims.heads
    scale = 1.0 if precision in ("fp16", "bf16") else 2.0
    per_block = s * h * (10 + 24 / tensor + 5 * a * s / (h * tensor))
    if checkpointing:
        per_sample = (2 * s * h * dims.depth + per_block) * scale
    else:
        per_sample = per_block * dims.depth * scale
    return per_sample * micro_batch


def deepspeed_estimate(params: float, stage: int, offload: bool, gpus_per_node: int, nodes: int,
                       largest_layer: int) -> dict[str, float] | None:
    """DeepSpeed 0.19's estimate_zero2/3_model_states_mem_needs (default buffer factor 1.5); None below ZeRO-2."""
    total = gpus_per_node * nodes
    if stage == 2:
        if offload:
            return {"device": 2.0 * params, "host": params * max(4 * total, 16) * 1.5}
        return {"device": 2.0 * params + int(18 * params / total), "host": params * 4 * gpus_per_node * 1.5}
    if stage == 3:
        # As bench's ranks call it: parameters stay on the GPU (cpu_offload_params=False), zero_init=True.
        if offload:
            return {"device": float(4 * largest_layer + int(2 * params / total)), "host": params * 16 / nodes * 1.5}
        return {"device": float(4 * largest_layer + int(18 * params / total)),
                "host": largest_layer * 4 * gpus_per_node * 1.5}
    return None


def predict(dims: VitDims, *, n: int, stage: int, precision: str, offload: bool, micro_batch: int,
            gpus_per_node: int, nodes: int, checkpointing: bool = False, tensor: int = 1) -> dict[str, float | None]:
    """Device bytes one rank needs: model states + activations, and DeepSpeed's estimate beside them.

    With T-way tensor parallelism of n ranks, a rank holds Psi_T = split / T + the rest, sharded by the
    stage over the n / T data-parallel ranks, and its share of the activations."""
    params = tensor_parallel_local_params(dims.split_params, dims.params - dims.split_params, tensor) \
        if tensor > 1 else dims.params
    states = model_state_bytes(params, n // tensor, stage, precision, offload)
    act = activation_bytes(dims, micro_batch, precision, checkpointing, tensor)
    ds = deepspeed_estimate(dims.params, stage, offload, gpus_per_node, nodes, dims.largest_layer)
    return {"model_states": states["device"], "host_states": states["host"], "activations": act,
            "total": states["device"] + act, "deepspeed_model_states": ds["device"] if ds else None}


def fits(total_bytes: float, capacity_bytes: float) -> bool:
    """The prediction fits when it leaves HEADROOM of the smallest GPU free."""
    return total_bytes <= capacity_bytes * (1.0 - HEADROOM)
