"""A rank's memory figures: reset when the steady steps begin, read before evaluation.

    reset = lambda: reset_peak(device)        # loop.train / pipeline.train call it at warm-up's end
    snap = snapshot(device)                   # after training, before the test set is put on the device

On a GPU the peak is torch's caching allocator's over the steady steps of
training only: warm-up (cuDNN/cuBLAS workspaces, the optimizer's first
allocation) is before the reset, evaluation (the test set resident on the
device, its activations) after the snapshot. On CPU the figure is the
process's peak resident set, which cannot be reset: the record says so.
"""

from __future__ import annotations

import os
import resource

from bench.core.accel_names import visible_devices


def reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def snapshot(device) -> dict:
    """peak_memory_bytes, memory_kind, the GPU's reserved/used/total bytes and which GPU it was, and the
    device's name, as the rank record carries them."""
    import torch

    if device.type != "cuda":
        return {"peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
                "memory_kind": "rss", "device": "cpu",
                "memory_note": "the process's peak resident set (ru_maxrss): everything the rank touched"}
    free, total = torch.cuda.mem_get_info(device)
    props = torch.cuda.get_device_properties(device)
    bus = ":".join(f"{x:02x}" for x in (getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None))
                   if isinstance(x, int)) or None
    return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)), "memory_kind": "device",
            "device": torch.cuda.get_device_name(device),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "device_used_bytes": int(total - free), "device_total_bytes": int(total),
            "memory_note": "peak allocated and reserved are torch's caching allocator's over the steady training "
                           "steps (reset at warm-up's end, read before evaluation): without the CUDA context and "
                           "NCCL's buffers; device_used (total - free then, every process on the GPU) includes them",
            "gpu": {"index": device.index, "cuda_visible_devices": visible_devices(os.environ),
                    "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"), "pci_bus_device": bus}}
