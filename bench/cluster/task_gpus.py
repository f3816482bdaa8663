"""One node's inventory from the probes of all its Slurm tasks: the GPUs the job's tasks were given, merged.

    node = merge_tasks([inv_task0, inv_task1])   # each a probe inventory carrying its "task" binding

Under `srun --gpus-per-task=1` a task is bound to one GPU, so a single probe
task per node would see one GPU however many the job's tasks get there; the
probe therefore runs one task per slot (bench.cluster.probe_launch) and
merges them here. What a task sees depends on the node:
  - without a device cgroup the driver's library lists every GPU of the node
    whatever the visible-devices variable says: the task's own are those it
    names (the indices Slurm binds, the library's order);
  - with one (ConstrainDevices) the library lists only the task's GPUs, each
    numbered from 0 in every task (NVIDIA/deepops#1102 shows `GPU 0` with
    two different UUIDs), so an index names nothing across tasks.
GPUs are therefore told apart by their PCI bus id, and the merged list is
numbered 0..k-1 in bus order: the numbering the slots use (a task takes
its node-local rank modulo what it sees, bench.worker.bootstrap). The index
the vendor's tool gave in the task that saw the GPU stays as node_index.
"""

from __future__ import annotations

import re

from bench.core.accel_names import visible_env


def task_of(environ) -> dict[str, str | None]:
    """What a probe task records of its binding (bench.cluster.probe.local_inventory)."""
    return {"cuda_visible_devices": environ.get(visible_env("cuda")), "slurm_localid": environ.get("SLURM_LOCALID"),
            "slurm_procid": environ.get("SLURM_PROCID")}


def _bus_key(gpu: dict) -> str | None:
    """00000000:02:00.0 (the vendor's tool and library) and 0000:02:00.0 (sysfs) as one key; None where none was given."""
    m = re.fullmatch(r"\s*([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-9A-Fa-f])\s*", gpu.get("pci_bus_id") or "")
    return f"{int(m[1], 16):04x}:{m[2]}:{m[3]}.{m[4]}".lower() if m else None


def task_gpus(inv: dict) -> list[dict]:
    """The GPUs this task was given: those the visible-devices variable names when the task sees more, else all."""
    gpus = inv.get("gpus") or []
    visible = (inv.get("task") or {}).get("cuda_visible_devices")
    if visible is None:
        return gpus
    names = [v.strip() for v in visible.split(",") if v.strip()]
    indices = {g.get("index") for g in gpus}
    if all(n.isdigit() for n in names) and len(names) < len(gpus) and {int(n) for n in names} <= indices:
        return [g for g in gpus if g.get("index") in {int(n) for n in names}]
    return gpus  # a device cgroup already shows only the task's GPUs (or the names are UUIDs: nothing to narrow)


def merge_tasks(tasks: list[dict]) -> dict:
    """One inventory for the node: the first task's (lowest local id), with the union of every task's GPUs."""
    tasks = sorted(tasks, key=lambda t: int((t.get("task") or {}).get("slurm_localid") or 0))
    merged: dict[str, dict] = {}
    seen = []
    for t in tasks:
        own = task_gpus(t)
        for g in own:
            # Without a bus id only the index can tell GPUs apart (true without a device cgroup only).
            merged.setdefault(_bus_key(g) or f"index {g.get('index')}", g)
        seen.append({**(t.get("task") or {}), "gpus_seen": len(t.get("gpus") or []),
                     "pci_bus_ids": [g.get("pci_bus_id") for g in own], "asked_torch": t.get("torch") is not None})
    gpus = [{**g, "index": i, "node_index": g.get("index")} for i, (_, g) in enumerate(sorted(merged.items()))]
    return {**tasks[0], "gpus": gpus, "probe_tasks": seen}
