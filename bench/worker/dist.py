"""The process group of a rank, set up once for training ranks and comm ranks alike.

    world, rank, local_rank, device = init(plan, via_deepspeed=True)
    # local_rank: the launcher's (SLURM_LOCALID under srun); device: the GPU this rank took

A plan with "independent": true (bench validate's per-GPU runs: every GPU
of every node at once, one rank each, no communication) gives every rank a
world of its own (rank 0 of 1, an in-process store): nothing it does waits
for another rank, so one GPU's failure or pace cannot move another's figure.

Every process group gets the run's collective timeout (plan.json
collective_timeout_s), the world group and the ones created later
(DeepSpeed's data-parallel group, bench comm's pairs) alike: new_group()
takes torch's module default (30 min), so without this a rank blocked on a
hung or cut-off peer waits half an hour.
"""

from __future__ import annotations

import datetime
import os

from bench.core.accel_names import by_device
from bench.core.provenance import release
from bench.worker.bootstrap import bind_device, env_local_rank, map_launcher_env


def _skip_shm_comm_build() -> None:
    """Do not JIT-build DeepSpeed's CPU shared-memory all-reduce op.

    DeepSpeed's TorchBackend compiles it at init_distributed (~30 s, and a
    shared build directory that concurrent runs rebuild in turn), yet only
    inference_all_reduce uses it: training all-reduces go through
    torch.distributed, so bench measures the same thing without it.
    """
    import importlib

    # Not `import deepspeed.comm.torch as m`: the package's `torch` attribute is
    # the torch library itself, which that form would bind instead.
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    ds_torch.build_shm_op = lambda: None


def bound_device(torch, device) -> dict:
    """init_process_group's device_id for a rank that owns one GPU (bench comm's ranks; DeepSpeed binds its own).

    Bound, torch creates NCCL's communicator at once (a rank that cannot reach its peers fails in init, not at
    its first collective), builds every later group by splitting it (bench comm splits each round's groups
    from it: bench.worker.groups), and never guesses the device from the rank. Not on CPU, and not on torch 2.6.x-2.7.0,
    where a bound device could hang (pytorch/pytorch#153960, the range DeepSpeed 0.19.8 skips too).
    """
    if device.type != "cuda":
        return {}
    version = release(torch.__version__) or ()
    if (2, 6, 0) < version < (2, 7, 1):
        return {}
    return {"device_id": device}


def init(plan: dict, *, via_deepspeed: bool):
    """(world size, rank, local rank, torch.device) of this rank, its process group initialised.

    via_deepspeed: through deepspeed.init_distributed (training: DeepSpeed's
    comm layer then knows the group); else plain torch.distributed (comm ranks
    need no DeepSpeed to move bytes).
    """
    import torch
    import torch.distributed as dist

    map_launcher_env(plan)
    backend = by_device(plan["device"])["collective_backend"]   # nccl on GPUs, gloo on CPU ranks
    timeout = datetime.timedelta(seconds=plan["collective_timeout_s"])
    dist.distributed_c10d.default_pg_timeout = timeout
    dist.distributed_c10d.default_pg_nccl_timeout = timeout
    if plan["device"] == "cuda":
        # Before anything of DeepSpeed runs: it takes LOCAL_RANK for the device index (bootstrap.bind_device),
        # and every engine (DeepSpeed, its pipeline, DDP, FSDP2) then uses this one device.
        local_rank, index = bind_device(torch.cuda.device_count(), plan)
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        local_rank, device = env_local_rank(), torch.device("cpu")
    if plan.get("independent"):
        # A world of one: DeepSpeed (and anything reading RANK/WORLD_SIZE) must see that world, not the
        # launcher's; LOCAL_RANK stays, it picks this rank's GPU. The caller kept the launcher's rank.
        # No device_id here: DeepSpeed 0.19.8 binds none in a world of one either (its #8248: a one-rank NCCL
        # group bound to its device failed with CUDA error 600 where the unbound one ran).
        os.environ.update(RANK="0", WORLD_SIZE="1")
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        if via_deepspeed:
            import deepspeed

            _skip_shm_comm_build()
            deepspeed.init_distributed(dist_backend=backend, timeout=timeout)  # adopts the group above
    elif via_deepspeed:
        import deepspeed

        _skip_shm_comm_build()
        deepspeed.init_distributed(dist_backend=backend, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, timeout=timeout, **bound_device(torch, device))
    return dist.get_world_size(), dist.get_rank(), local_rank, device
