"""The process group of a rank, set up once for training ranks and comm ranks alike.

    world, rank, local_rank, device = init(plan, via_deepspeed=True)
    # local_rank: the launcher's (SLURM_LOCALID under srun); device: the GPU this rank took

Every process group gets the run's collective timeout (plan.json
collective_timeout_s), the world group and the ones created later
(DeepSpeed's data-parallel group, bench comm's pairs) alike: new_group()
takes torch's module default (30 min), so without this a rank blocked on a
hung or cut-off peer waits half an hour.
"""

from __future__ import annotations

import datetime

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


def init(plan: dict, *, via_deepspeed: bool):
    """(world size, rank, local rank, torch.device) of this rank, its process group initialised.

    via_deepspeed: through deepspeed.init_distributed (training: DeepSpeed's
    comm layer then knows the group); else plain torch.distributed (comm ranks
    need no DeepSpeed to move bytes).
    """
    import torch
    import torch.distributed as dist

    map_launcher_env(plan)
    backend = "nccl" if plan["device"] == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=plan["collective_timeout_s"])
    dist.distributed_c10d.default_pg_timeout = timeout
    dist.distributed_c10d.default_pg_nccl_timeout = timeout
    if plan["device"] == "cuda":
        # Before anything of DeepSpeed runs: it takes LOCAL_RANK for the device index (bootstrap.bind_device),
        # and every engine (DeepSpeed, its pipeline, DDP, FSDP2) then uses this one device.
        local_rank, index = bind_device(torch.cuda.device_count())
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        local_rank, device = env_local_rank(), torch.device("cpu")
    if via_deepspeed:
        import deepspeed

        _skip_shm_comm_build()
        deepspeed.init_distributed(dist_backend=backend, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, timeout=timeout)
    return dist.get_world_size(), dist.get_rank(), local_rank, device
