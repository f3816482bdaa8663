"""Tensor parallelism of a timm ViT's blocks (Megatron's split), with torch's DTensor or DeepSpeed's AutoTP.

    world_mesh = mesh(device, 2)                  # (dp, tp), T innermost: rank = d T + t (bench.core.parallel)
    parallelize(vit, world_mesh["tp"])            # DTensor: qkv, fc1 by columns; proj, fc2 by rows
    after_autotp(vit)                             # DeepSpeed's AutoTP split it: fix what it leaves to timm

Each block's attention and MLP are split the way Megatron-LM splits a
transformer layer: qkv and fc1 column-wise (each rank computes its share of
the outputs from the whole input), proj and fc2 row-wise (each rank's
partial sum over its share, all-reduced). So per block and micro batch two
all-reduces of the activations in forward (after proj, after fc2) and two
in backward (the gradients of the qkv and fc1 inputs), and nothing else;
norms, the patch embedding, tokens and head stay whole on every rank (their
gradients agree across the group because the activations' do).

qkv is one Linear to 3 x heads x head_dim (timm's layout along the output:
q of every head, then k, then v). Split as it is, rank 0 would get all of q
and half of k. parallelize() first permutes the rows to [T, 3, H/T, head_dim],
so the dim-0 shard of rank t is q, k and v of heads tH/T .. (t+1)H/T - 1, and
tells the block it has H/T heads. DeepSpeed's AutoTP does the same from its
"shape" [3, -1] spec (bench.core.dsconfig.AUTOTP_VIT) and divides num_heads,
but not timm's attn_dim, which after_autotp sets.

Sequence parallelism (norms on token shards, all-reduce as reduce-scatter +
all-gather) is not applied: a ViT's token count is odd (a class token plus
a square of patches), and on gloo a reduce-scatter sends as much as an
all-reduce, so it would move more bytes, not fewer.
"""

from __future__ import annotations

from typing import Any

COLUMN = ("attn.qkv", "mlp.fc1")
ROW = ("attn.proj", "mlp.fc2")


def mesh(device, tensor: int):
    """The (dp, tp) device mesh over the world, T innermost (consecutive ranks form a TP group)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    return init_device_mesh(device.type, (world // tensor, tensor), mesh_dim_names=("dp", "tp"))


def _blocks(model) -> list:
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ValueError(f"--tensor-parallel: {type(model).__name__} has no .blocks (a timm ViT's) to split")
    return list(blocks)


def check(model, tensor: int) -> None:
    """ValueError (one line) where the model's blocks cannot be split T ways as Megatron splits them."""
    import torch

    for i, b in enumerate(_blocks(model)):
        attn, mlp = getattr(b, "attn", None), getattr(b, "mlp", None)
        linears = [getattr(attn, "qkv", None), getattr(attn, "proj", None), getattr(mlp, "fc1", None),
                   getattr(mlp, "fc2", None)]
        if not all(isinstance(m, torch.nn.Linear) for m in linears):
            raise ValueError(f"--tensor-parallel: block {i} is not timm's attention (qkv, proj) and MLP (fc1, fc2) "
                             "of Linear layers")
        if getattr(attn, "gate", None) is not None or not isinstance(getattr(attn, "norm", None), torch.nn.Identity):
            raise ValueError(f"--tensor-parallel: block {i}'s attention is gated or normalised across heads")
        if attn.num_heads % tensor:
            raise ValueError(f"--tensor-parallel: {attn.num_heads} heads do not divide by {tensor}")
        if mlp.fc1.out_features % tensor:
            raise ValueError(f"--tensor-parallel: the MLP width {mlp.fc1.out_features} does not divide by {tensor}")


def split_params(model) -> tuple[int, int]:
    """(parameters the split divides by T, parameters every rank keeps whole) of the unsplit model.

    Split: qkv and fc1 (weights and biases: column shards), proj and fc2 weights (row shards). Whole: proj
    and fc2 biases (added once, after the all-reduce), norms, embeddings, tokens and head.
    """
    split = 0
    for b in _blocks(model):
        for name in COLUMN:
            split += sum(p.numel() for p in b.get_submodule(name).parameters())
        for name in ROW:
            split += b.get_submodule(name).weight.numel()
    return split, sum(p.numel() for p in model.parameters()) - split


def local_split_params(model) -> int:
    """The elements of the split layers' weights this rank holds (its DTensor shards, or AutoTP's local layers)."""
    from torch.distributed.tensor import DTensor

    def local(p) -> int:
        # ZeRO-3 has partitioned AutoTP's local layers already: ds_numel is the layer's (TP-local) size.
        return (p.to_local() if isinstance(p, DTensor) else p).numel() if not hasattr(p, "ds_numel") else p.ds_numel

    n = 0
    for b in _blocks(model):
        for name in COLUMN:
            n += sum(local(p) for p in b.get_submodule(name).parameters())
        for name in ROW:
            n += local(b.get_submodule(name).weight)
    return n


def _regroup_qkv(attn, tensor: int) -> None:
    """Rows [3, H, hd] -> [T, 3, H/T, hd] (module docstring), and H/T heads for this block's forward."""
    import torch

    h, hd = attn.num_heads, attn.head_dim
    with torch.no_grad():
        for p in attn.qkv.parameters():
            tail = p.shape[1:]
            p.copy_(p.view(3, tensor, h // tensor, hd, *tail).transpose(0, 1).reshape(p.shape))
    attn.num_heads = h // tensor
    attn.attn_dim = attn.num_heads * hd


def parallelize(model, tp_mesh) -> None:
    """Split every block over tp_mesh with DTensor (ColwiseParallel / RowwiseParallel); the rest stays whole."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tensor = tp_mesh.size()
    check(model, tensor)
    plan = {**{n: ColwiseParallel() for n in COLUMN}, **{n: RowwiseParallel() for n in ROW}}
    for b in _blocks(model):
        _regroup_qkv(b.attn, tensor)
        parallelize_module(b, tp_mesh, plan)


def after_autotp(model) -> None:
    """DeepSpeed's AutoTP divided each attention's num_heads by T; timm's reshape reads attn_dim too."""
    for b in _blocks(model):
        b.attn.attn_dim = b.attn.num_heads * b.attn.head_dim


def describe(model, tensor: int, rank: int, whole: tuple[int, int], how: str) -> dict[str, Any]:
    """What this rank holds of the split: the record's rank.tensor_parallel."""
    return {"size": tensor, "rank": rank % tensor, "how": how, "split_params": whole[0],
            "replicated_params": whole[1], "local_split_params": local_split_params(model),
            # What Megatron's activation traffic is counted from (bench.analysis.volume): N tokens of width D.
            "tokens": model.patch_embed.num_patches + getattr(model, "num_prefix_tokens", 1),
            "width": model.embed_dim, "depth": len(_blocks(model))}


def param_groups(params) -> list[dict[str, Any]]:
    """The parameters grouped by the DTensor mesh they live on (or none): torch's fused and foreach AdamW
    step a group's tensors in one call, which cannot mix DTensors of two meshes (FSDP2's 1D and 2D)."""
    from torch.distributed.tensor import DTensor

    groups: dict[Any, list] = {}
    for p in params:
        key = (p.device_mesh.mesh_dim_names, p.device_mesh.shape) if isinstance(p, DTensor) else None
        groups.setdefault(key, []).append(p)
    return [{"params": ps} for ps in groups.values()]


def clip_grad_norm_(parameters, max_norm: float):
    """torch.nn.utils.clip_grad_norm_'s arithmetic (2-norm, coefficient max_norm / (norm + 1e-6) capped at 1)
    over gradients that are DTensors of different meshes, or plain tensors, which torch's cannot stack.

    Each gradient's local sum of squares is added within its kind (mesh, sharded mesh dims), all-reduced
    over the process groups of the dimensions it is sharded on (a replicated dimension holds the same
    values on every rank: counted once), and the kinds are summed.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    kinds: dict[Any, tuple[Any, tuple[int, ...], list]] = {}
    grads = []
    for p in parameters:
        g = p.grad
        if g is None:
            continue
        if isinstance(g, DTensor):
            if any(pl.is_partial() for pl in g.placements):
                raise ValueError("clip_grad_norm_: a gradient is still a partial sum")
            # Not pl.is_shard(): FSDP2's dim-0 shard of a TP shard is a _StridedShard, for which it is False.
            dims = tuple(i for i, pl in enumerate(g.placements) if not pl.is_replicate())
            local = g.to_local()
            kinds.setdefault((id(g.device_mesh), dims), (g.device_mesh, dims, []))[2].append(local)
        else:
            local = g
            kinds.setdefault(None, (None, (), []))[2].append(local)
        grads.append(local)
    if not grads:
        return torch.zeros(())
    total = torch.zeros((), dtype=torch.float32, device=grads[0].device)
    for m, dims, tensors in kinds.values():
        sq = torch.stack([torch.linalg.vector_norm(t, dtype=torch.float32) for t in tensors]).square().sum()
        for d in dims:
            dist.all_reduce(sq, group=m.get_group(d))
        total = total + sq
    norm = total.sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    by_dtype: dict[Any, list] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for dtype, gs in by_dtype.items():
        torch._foreach_mul_(gs, coef.to(dtype))
    return norm
