"""The Slurm probe's one task per slot, merged per node (bench.cluster.task_gpus), on a recorded 2-GPU node.

Issue 21, item 1: under `srun --gpus-per-task=1` one probe task per node is bound to one GPU. The probe
runs a task per slot and merges what they were given; tests/multihost/test_slurm_gpus.py runs it on a real
Slurm with GRES.
"""

from __future__ import annotations

from bench.cluster.hetero import verdict
from bench.cluster.inventory import selected
from bench.cluster.probe_launch import probe_srun_argv
from bench.cluster.task_gpus import merge_tasks, task_gpus
from tests.unit.test_hetero import node

FIXTURE = "nvidia-smi-query_rtx5060ti_x2_busid.csv"  # 2x RTX 5060 Ti, buses 02:00.0 and 03:00.0


def _task(localid: int, visible: str | None, gpus: list[int] | None = None, renumber: bool = False) -> dict:
    """A probe task of the recorded node: NVML's view (all GPUs, or a device cgroup's subset) and its binding."""
    inv = node("gpu-node1", FIXTURE)
    if gpus is not None:
        inv["gpus"] = [dict(g, index=n if renumber else g["index"]) for n, g in
                       enumerate(g for g in inv["gpus"] if g["index"] in gpus)]
    inv["task"] = {"cuda_visible_devices": visible, "slurm_localid": str(localid), "slurm_procid": str(localid)}
    return inv


def _codes(inv: dict) -> list[str]:
    return [f["code"] for f in verdict([selected(inv)])["findings"]]


def test_without_a_device_cgroup_each_task_keeps_the_gpu_slurm_bound_it_to():
    # NVML lists both GPUs in every task; CUDA_VISIBLE_DEVICES says which one is the task's.
    t0, t1 = _task(0, "0"), _task(1, "1")
    assert [g["pci_bus_id"] for g in task_gpus(t1)] == ["00000000:03:00.0"]
    merged = dict(merge_tasks([t1, t0]), slots=[0, 1])
    assert [(g["index"], g["node_index"], g["pci_bus_id"]) for g in merged["gpus"]] == [
        (0, 0, "00000000:02:00.0"), (1, 1, "00000000:03:00.0")]
    assert [t["pci_bus_ids"] for t in merged["probe_tasks"]] == [["00000000:02:00.0"], ["00000000:03:00.0"]]
    assert "slots-beyond-gpus" not in _codes(merged)


def test_inside_a_device_cgroup_every_task_sees_gpu_0_and_the_bus_ids_tell_them_apart():
    # ConstrainDevices: each task lists only its GPU, numbered 0 (NVIDIA/deepops#1102), CUDA_VISIBLE_DEVICES=0.
    t0, t1 = _task(0, "0", gpus=[0], renumber=True), _task(1, "0", gpus=[1], renumber=True)
    assert t0["gpus"][0]["index"] == t1["gpus"][0]["index"] == 0
    merged = dict(merge_tasks([t0, t1]), slots=[0, 1])
    assert [g["pci_bus_id"] for g in merged["gpus"]] == ["00000000:02:00.0", "00000000:03:00.0"]
    assert [g["index"] for g in merged["gpus"]] == [0, 1]
    assert "slots-beyond-gpus" not in _codes(merged)
    # What one probe task per node saw before: one GPU for two slots.
    one = dict(t0, slots=[0, 1])
    assert "slots-beyond-gpus" in _codes(one)


def test_two_tasks_given_the_same_gpu_are_refused_as_slots_beyond_gpus():
    # --gres=gpu:1 --ntasks-per-node=2: both tasks bound to GPU 0; the merge keeps one GPU for two slots.
    merged = dict(merge_tasks([_task(0, "0"), _task(1, "0")]), slots=[0, 1])
    assert len(merged["gpus"]) == 1
    v = verdict([selected(merged)])
    (f,) = [f for f in v["findings"] if f["code"] == "slots-beyond-gpus"]
    assert "2 task(s)" in f["message"] and "given 1 GPU(s)" in f["message"] and "--gpus-per-task=1" in f["message"]


def test_a_task_without_binding_keeps_every_gpu_it_sees():
    merged = merge_tasks([_task(0, None)])
    assert len(merged["gpus"]) == 2 and merged["probe_tasks"][0]["gpus_seen"] == 2


def test_probe_srun_has_one_task_per_slot_laid_out_as_the_jobs_tasks():
    # Each task answers for its own node: one that exits ends none of the others (bench.cluster.probe_launch).
    argv, layout = probe_srun_argv({"node1": [0, 1], "node2": [0, 1]})
    assert argv == ["srun", "--label", "--nodes", "2", "--ntasks", "4", "--ntasks-per-node", "2", "--nodelist",
                    "node1,node2", "--kill-on-bad-exit=0"] and layout is None
    argv, layout = probe_srun_argv({"node1": [0, 1], "node2": [0]})
    assert argv == ["srun", "--label", "--ntasks", "3", "--distribution=arbitrary", "--kill-on-bad-exit=0"]
    assert layout == "node1\nnode1\nnode2\n"
