"""Before an --offload nvme run launches: DeepSpeed's async_io op can be built, and the swap path has room.

    check(cfg, placement)      # BadInput (exit 2) naming --offload or --nvme-path; nothing has started

ZeRO-Infinity swaps the fp32 optimizer states (master copy and two Adam
moments, 12 bytes per parameter) and the parameters (b bytes) of each
rank's partition to files under --nvme-path through DeepSpeed's async_io
op, which is compiled on first use against libaio. Without libaio's headers
the op cannot be built and every rank would fail after minutes of start-up;
without room the swap fails mid-run. Both are checked on this node, before
any rank starts: the op by asking DeepSpeed itself (AsyncIOBuilder's
is_compatible, in a child Python, so bench's own process never imports
deepspeed), the room for this node's ranks from the model's parameter count
(bench.core.model_size). What it cannot see: other nodes' libaio and NVMe
(each rank's DeepSpeed says so in its log, and the run fails naming it).
"""

from __future__ import annotations

import os
import subprocess
import sys

from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.core.model_size import shape_of, vit_params
from bench.core.models import resolve_model
from bench.core.storage import existing, free_bytes
from bench.jobs.plan import Placement

_PROBE = ("import sys\n"
          "from deepspeed.ops.op_builder import AsyncIOBuilder\n"
          "sys.exit(0 if AsyncIOBuilder().is_compatible(verbose=False) else 3)\n")
FIX = "apt-get install libaio-dev (scripts/install-system.sh does), or set CFLAGS/LDFLAGS to where libaio is"


def swap_bytes_per_rank(params: int, world: int, precision: str) -> int:
    """Bytes one rank swaps: its 1/world partition of 12 bytes of fp32 optimizer states and b of parameters."""
    b = 2 if precision in ("fp16", "bf16") else 4
    return -(-(12 + b) * params // world)


def async_io_buildable(python: str = sys.executable, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """(ok, why not): DeepSpeed's own check that its async_io op can be compiled and linked here."""
    try:
        p = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"the check could not run ({e})"
    if p.returncode == 0:
        return True, ""
    if p.returncode == 3:
        return False, "DeepSpeed's async_io op cannot be built on this node (libaio's headers or library missing)"
    last = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return False, f"DeepSpeed could not be asked ({last})"


def check(cfg: RunConfig, placement: Placement, *, env: dict[str, str] | None = None) -> None:
    """Refuse an --offload nvme run that cannot start or cannot swap (see the module docstring)."""
    if cfg.offload != "nvme":
        return
    path = cfg.nvme_path or ""
    where = existing(path)  # the path, or its nearest parent that exists (DeepSpeed makes the rest)
    if not os.path.isdir(where):
        raise BadInput(f"--nvme-path: {path} is not a directory")
    if not os.access(where, os.W_OK):
        raise BadInput(f"--nvme-path: {where} is not writable")
    ok, why = async_io_buildable(env=env)
    if not ok:
        raise BadInput(f"--offload nvme: {why}: {FIX}")
    shape = shape_of(resolve_model(cfg.model, cfg.img_size, 10))
    if shape is None:
        return  # a model bench cannot count before it is built: DeepSpeed reports a full disk itself
    per_rank = swap_bytes_per_rank(vit_params(shape), placement.world, cfg.precision)
    here = max(len(s) for s in placement.resources.values())
    need, free = per_rank * here, free_bytes(where)
    if free is not None and free < need:
        raise BadInput(f"--nvme-path: {where} has {_size(free)} free; {here} rank(s) of {cfg.model} swap "
                       f"{_size(need)} there ((12 + b) bytes x parameters / {placement.world} ranks each)")


def _size(b: int) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"
