"""What the installed torch was built with, as one JSON line: `python -m bench.worker.torch_probe`.

    {"version": "2.14.1+cu130", "cuda": "13.0", "nccl": "2.30.7", "arch_list": ["sm_75", ...],
     "cuda_available": false, "device_count": 0}

bench.cluster.probe runs this in a fresh interpreter on each node: only the
worker package imports torch, and a torch that fails to import (or a CUDA
init that hangs) then costs the probe one subprocess, not itself.
"""

from __future__ import annotations

import json
import sys


def info() -> dict:
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - a broken torch is a finding, not a crash
        return {"error": f"{type(e).__name__}: {e}"}
    try:
        nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception as e:  # noqa: BLE001 - a CPU build has no NCCL; say so
        nccl = f"unavailable: {type(e).__name__}"
    try:
        arch = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else None
        available = bool(torch.cuda.is_available())
        return {"version": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
                "arch_list": (arch or "").split() or torch.cuda.get_arch_list(),
                "cuda_available": available, "device_count": torch.cuda.device_count() if available else 0}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


if __name__ == "__main__":
    print(json.dumps(info()), flush=True)
    sys.exit(0)
