"""Where each rank of a launch runs: (host, slot) in the launchers' order, and which GPU it takes there.

    rank_slots({"n1": [0, 2], "n2": [1]})     # [("n1", 0), ("n1", 2), ("n2", 1)]: rank 0, 1, 2
    gpu_index(plan, rank, local_rank=1, visible=4)   # 2: the rank's slot, where it sees every GPU of its node

Every launcher bench uses numbers the ranks host by host, slot by slot, in
the order of the resources (DeepSpeed's runners by the hostfile, mpirun by
filling each host's slots in turn, srun by the task list bench writes).
Shared with the ranks: imports nothing of bench.
"""

from __future__ import annotations

# How a rank finds its GPU (plan.json "gpu_by"): bench's node launcher shows each node only the GPUs of its
# selected slots (the visible-devices variable, as DeepSpeed's launch.py), so there the local rank is the index; mpirun and srun
# show a rank every GPU of its node (or the one a Slurm task was bound to), so there the rank takes its slot.
BY_LOCAL_RANK, BY_SLOT = "local_rank", "slot"


def rank_slots(resources: dict[str, list[int]]) -> list[tuple[str, int]]:
    """(host, slot) of each global rank, in the launchers' order."""
    return [(h, s) for h, slots in resources.items() for s in slots]


def gpu_index(plan: dict, rank: int, local_rank: int, visible: int) -> int:
    """The CUDA index this rank takes among the `visible` GPUs it sees.

    By local rank (modulo what it sees: srun --gpus-per-task=1 shows each task one GPU, cuda:0, while its
    local rank counts the node's tasks); by slot where the launcher shows every GPU of the node. A slot the
    rank cannot see is a ValueError that says why: Slurm bound the task to GPUs of its own choosing.
    """
    if plan.get("gpu_by") != BY_SLOT:
        return local_rank % max(visible, 1)
    host, slot = rank_slots(plan["resources"])[rank]
    if slot < visible:
        return slot
    if slot == local_rank:  # leading slots under per-task binding: the task's own GPU(s)
        return local_rank % max(visible, 1)
    raise ValueError(f"slot {slot} of {host} is not among the {visible} GPU(s) this rank sees: the launcher bound "
                     f"it to GPUs of its own choosing (srun --gpus-per-task); allocate with --gpus-per-node, or "
                     f"select each node's first slots")
