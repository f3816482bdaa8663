"""The model-state bytes one rank holds, from the tensors themselves: parameters, gradients, optimizer states.

    measure(engine)   # {"params": B, "grads": B, "master_params": B, "optimizer_states": B, "total": B,
                      #  "by_device": {"cpu": B}, "how": "..."}

Taken on the last step after each backward and before the optimizer step,
when gradients and optimizer states both exist; the record keeps the
largest total held at one of those micro steps and each category's own
largest (peak()). Every tensor is counted by its storage (untyped_storage().nbytes()), each storage once, so a flat buffer
and the parameters that are views into it (ZeRO's bit16 groups) count once.

  params            the model's weights as the engine keeps them: each module
                    parameter's storage, and its partition (ds_tensor) where ZeRO-3
                    partitioned it (a parameter ZeRO-3 keeps gathered, one below
                    stage3_param_persistence_threshold, counts whole and partition)
  master_params     tensors the inner torch optimizer steps that are not those
                    weights: ZeRO's fp32 partitions (DeepSpeed keeps one at stage
                    >= 1 even in fp32 training)
  optimizer_states  the inner torch optimizer's state (AdamW's exp_avg, exp_avg_sq, step)
  grads             the .grad of the weights and of the master partitions, and
                    every other tensor the engine's optimizer object holds
                    (ZeRO's gradient partitions and flat gradient buffers)
  buffers           beside the model states, not in their total: tensors held
                    under a name with "bucket" or "ipg" (ZeRO's reduction
                    buckets: the ZeRO paper's temporary buffers). On CPU an
                    untouched bucket is virtual memory, not resident

Under --offload nvme, by_device["nvme"] is the size of the rank's swap
files at that moment (model states swapped out; not in total, which is what
the rank holds in memory).

What it cannot see: activations and the autograd graph, the data shard,
allocator caches and fragmentation, NCCL buffers, the CUDA context
(peak device memory says those, on GPUs). Tensors an optimizer reaches only
through a closure or a C++ object are missed.
"""

from __future__ import annotations

import os
from typing import Any

CATEGORIES = ("params", "grads", "master_params", "optimizer_states")  # the model states; buffers beside
_MAX_DEPTH = 3


def _key(t) -> tuple[str, int]:
    s = t.untyped_storage()
    return (str(t.device), s.data_ptr())


def _tensors(obj: Any, path: str = "", depth: int = 0, seen: set | None = None):
    """(attribute path, tensor) reachable from obj through attributes, lists, tuples and dicts, a few levels deep."""
    import torch

    seen = set() if seen is None else seen
    if id(obj) in seen or depth > _MAX_DEPTH:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield path, obj
        grad = obj.grad if obj.is_leaf else None
        if grad is not None:
            yield path + ".grad", grad
        return
    if isinstance(obj, (list, tuple, set)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)) or not hasattr(obj, "__dict__"):
        return  # a module's tensors are its parameters (counted apart); a nested torch optimizer is the inner one
    else:
        items = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    for sub, item in items:
        if isinstance(item, (torch.Tensor, list, tuple, dict, set)) or hasattr(item, "__dict__"):
            yield from _tensors(item, sub, depth + 1, seen)


def _role(path: str) -> str:
    """What a tensor an engine's optimizer holds is for, from its attribute's name (DeepSpeed's names)."""
    name = path.lower()
    if "bucket" in name or "ipg" in name:
        return "buffers"  # reduction buckets: the ZeRO paper's temporary buffers, not model states
    return "grads"


def inner_optimizer(opt: Any):
    """The torch.optim.Optimizer that really steps (DeepSpeed wraps it in its ZeRO or fp16 optimizers)."""
    import torch

    for _ in range(5):
        if isinstance(opt, torch.optim.Optimizer) and not hasattr(opt, "optimizer"):
            return opt
        nxt = getattr(opt, "optimizer", None)
        if nxt is None:
            return opt if isinstance(opt, torch.optim.Optimizer) else None
        opt = nxt
    return None


def measure(module, optimizer) -> dict[str, Any]:
    """Model-state bytes of this rank, by category and by device (see the module docstring)."""
    import torch
    from torch.distributed.tensor import DTensor

    owner: dict[tuple[str, int], str] = {}
    size: dict[tuple[str, int], int] = {}

    def claim(t, category: str) -> None:
        if isinstance(t, DTensor):
            t = t.to_local()  # FSDP2's shards: this rank holds the local tensor only
        if not isinstance(t, torch.Tensor) or t.numel() == 0 and not hasattr(t, "ds_tensor"):
            return
        k = _key(t)
        if k not in owner:
            owner[k], size[k] = category, t.untyped_storage().nbytes()

    for p in module.parameters():
        # ZeRO-3 keeps a parameter's partition in ds_tensor and, while it is gathered (or persistent:
        # smaller than stage3_param_persistence_threshold), the whole of it in p.data as well.
        claim(p, "params")
        claim(getattr(p, "ds_tensor", None), "params")
    inner = inner_optimizer(optimizer)
    if inner is not None:
        for group in inner.param_groups:
            for p in group["params"]:
                claim(p, "master_params")
        for state in inner.state.values():
            for v in state.values():
                claim(v, "optimizer_states")
    for p in module.parameters():
        claim(p.grad, "grads")
    if inner is not None:
        for group in inner.param_groups:
            for p in group["params"]:
                claim(p.grad, "grads")
    if optimizer is not None and optimizer is not inner:
        for path, tensor in _tensors(optimizer, "optimizer"):
            claim(tensor, _role(path))
    out: dict[str, Any] = {c: 0 for c in (*CATEGORIES, "buffers")}
    by_device: dict[str, int] = {}
    for k, c in owner.items():
        out[c] += size[k]
        if c in CATEGORIES:
            by_device[k[0]] = by_device.get(k[0], 0) + size[k]
    out["total"] = sum(out[c] for c in CATEGORIES)
    out["by_device"] = by_device
    out["how"] = "storages of the tensors the engine holds, each once, between the last backward and its step"
    return out


def peak(measurements: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest model states held at one instant, and each category's own largest, over the micro steps.

    `total` is the largest total of one measurement: what the rank held at once (a run must fit it).
    The categories are each one's maximum over the measurements, which may come from different micro
    steps (ZeRO-2's gradient partitions grow as the step goes, a boundary frees them), so their sum
    can exceed any instant's total: `at_largest` holds the categories of the instant `total` is from.
    """
    if not measurements:
        return {}
    largest = max(measurements, key=lambda m: m["total"])
    out: dict[str, Any] = {c: max(m[c] for m in measurements) for c in (*CATEGORIES, "buffers")}
    out["total"] = largest["total"]
    out["at_largest"] = {c: largest[c] for c in CATEGORIES}
    devices = {d for m in measurements for d in m["by_device"]}
    out["by_device"] = {d: max(m["by_device"].get(d, 0) for m in measurements) for d in devices}
    out["measured_at"] = (f"after each of the last step's {len(measurements)} backward pass(es): total at the "
                          "instant it was largest, each category its own largest")
    out["how"] = measurements[0]["how"]
    return out


def _rank_swap_dirs(nvme_path: str, rank: int) -> list[str]:
    """This rank's swap folders: <nvme_path>/zero_stage_3/<kind>/rank<R> (DeepSpeed's layout), nothing else."""
    import glob

    return sorted(glob.glob(os.path.join(glob.escape(nvme_path), "zero_stage_*", "*", f"rank{rank}")))


def remove_swap_files(nvme_path: str, rank: int) -> int:
    """Delete this rank's swap folders after the run (DeepSpeed leaves them; bench's ranks end with os._exit).

    Only the rank<R> folders DeepSpeed made under nvme_path are removed, and their parents if empty:
    never anything else of the user's directory. Returns the bytes freed.
    """
    import shutil

    freed = swapped_bytes(nvme_path, rank)
    for d in _rank_swap_dirs(nvme_path, rank):
        shutil.rmtree(d, ignore_errors=True)
        for parent in (os.path.dirname(d), os.path.dirname(os.path.dirname(d))):
            try:
                os.rmdir(parent)  # only when empty: another rank may still be writing beside it
            except OSError:
                pass
    return freed


def swapped_bytes(nvme_path: str, rank: int) -> int:
    """Bytes in this rank's ZeRO-Infinity swap files (DeepSpeed writes <nvme_path>/zero_stage_3/<kind>/rank<R>/)."""
    total = 0
    for d in _rank_swap_dirs(nvme_path, rank):
        for top, _dirs, files in os.walk(d):
            total += sum(os.path.getsize(os.path.join(top, f)) for f in files if os.path.isfile(os.path.join(top, f)))
    return total
