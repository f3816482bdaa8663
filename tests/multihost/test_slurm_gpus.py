"""Slurm's per-task GPU binding, on a real Slurm 22.05 whose nodes have GRES gpu:2 (device nodes, slurm.py).

Nothing here is a GPU, but Slurm allocates the GRES and binds them to tasks as it would real ones, so
the environment every task gets is the real one. Under `--gpus-per-task=1`:
  - bench's training srun (bench.launch.slurm) gives each task one GPU (CUDA_VISIBLE_DEVICES 0 or 1)
    while SLURM_LOCALID counts the node's tasks; bench.worker.bootstrap.bind_device makes LOCAL_RANK, which
    DeepSpeed reads as the device index (worker/dist.py says where), the index among the GPUs the task
    sees: 0 for every task;
  - bench's probe (bench.cluster.probe_launch) runs one task per slot, each bound like a training task
    (a step may not ask more GPUs per task than the job: "Step requested gres_per_task=gpu:2 is more than
    the job's"), and merges what they were given per node by PCI bus (bench.cluster.task_gpus), so the
    gate sees the node's two GPUs, not the one a single task is given.
What NVML would list there is a recorded 2-GPU node (tests/fixtures/gpu, an `nvidia-smi` on the tasks'
PATH that prints it): without a device cgroup (task/none, as here) NVML lists every GPU of the node
whatever CUDA_VISIBLE_DEVICES says. The device-cgroup view (each task sees its GPU as index 0) is
tests/unit/test_task_gpus.py's. The real device binding (CUDA, DeepSpeed, NCCL) is benchmarks/gpu-check.sh's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import REPO

from .slurm import Slurm, build_slurm, slurm_possible

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

# Runs inside the allocation: bench's own srun argv for training and for the probe, each with a payload
# that prints what the task was given in place of the rank (no GPU can run one here).
DRIVER = r'''
import json, os, sys
from bench.launch.plan import build, write_files

nodes = os.environ["SLURM_JOB_NODELIST_EXPANDED"].split(",")
task = ("import json, os; from bench.worker.bootstrap import bind_device; "
        "seen = os.environ.get('CUDA_VISIBLE_DEVICES', ''); local = os.environ.get('SLURM_LOCALID'); "
        "launcher, index = bind_device(len([g for g in seen.split(',') if g])); "
        "print(json.dumps({'host': os.uname().nodename, 'localid': local, 'visible': seen, "
        "'launcher_local_rank': launcher, 'LOCAL_RANK': os.environ['LOCAL_RANK']}))")
resources = {n: [0, 1] for n in nodes}
lp = build(resources, "slurm", sys.argv[1], "cuda", "10.0.0.1", 29500, environ=dict(os.environ))
os.makedirs(sys.argv[1], exist_ok=True)
write_files(lp, resources, None)  # the task list srun places the ranks by (SLURM_HOSTFILE)
argv = lp.argv[:lp.argv.index(sys.executable)] + [sys.executable, "-c", task]
train = __import__("subprocess").run(argv, capture_output=True, text=True, env={**os.environ, **lp.env}, timeout=60)
print(json.dumps({"argv": argv, "train": train.stdout, "train_err": train.stderr[-2000:]}))
'''


@pytest.fixture(scope="module")
def slurm_gpus(cluster_factory) -> Iterator[Slurm]:
    """A Slurm with GRES over hosts of its own: the session's hosts run the session's Slurm (conftest.slurm),
    and two slurmd cannot share a host."""
    missing = slurm_possible()
    if missing is not None:
        pytest.skip(missing)
    with build_slurm(cluster_factory(3), gpus=2) as s:
        yield s


@pytest.fixture(scope="module")
def bound(slurm_gpus, tmp_path_factory) -> dict:
    """The driver's answer from inside `salloc -N 3 --ntasks-per-node=2 --gpus-per-task=1` (one allocation)."""
    out = tmp_path_factory.mktemp("slurm-gpus")
    driver = out / "driver.py"
    driver.write_text(DRIVER)
    nodelist = ",".join(slurm_gpus.nodes)
    proc = slurm_gpus.run(["salloc", "-N", str(len(slurm_gpus.nodes)), "--ntasks-per-node=2", "--gpus-per-task=1",
                           "env", f"SLURM_JOB_NODELIST_EXPANDED={nodelist}", sys.executable,
                           str(driver), str(out / "run")], cwd=REPO, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:] + slurm_gpus.run(["sinfo", "-N", "-o", "%N %c %G %T"]).stdout
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_gpus_per_task_gives_each_training_task_one_gpu_and_bench_takes_index_0(bound):
    tasks = [json.loads(line) for line in bound["train"].splitlines() if line.startswith("{")]
    assert len(tasks) == 6, bound["train_err"]
    # What Slurm gave: one GPU per task, the node's second task SLURM_LOCALID=1 (DeepSpeed would take cuda:1).
    for host in {t["host"] for t in tasks}:
        assert sorted(t["visible"] for t in tasks if t["host"] == host) == ["0", "1"], tasks
    assert sorted(t["localid"] for t in tasks) == ["0", "0", "0", "1", "1", "1"]
    # What bench makes of it before DeepSpeed starts: LOCAL_RANK 0 everywhere; the launcher's id is kept.
    assert {t["LOCAL_RANK"] for t in tasks} == {"0"}
    assert sorted(t["launcher_local_rank"] for t in tasks) == [0, 0, 0, 1, 1, 1]


SMI = "nvidia-smi-query_rtx5060ti_x2_busid.csv"  # 2x RTX 5060 Ti on buses 02:00.0 and 03:00.0
BUSES = ["00000000:02:00.0", "00000000:03:00.0"]


@pytest.fixture(scope="module")
def probed(slurm_gpus, tmp_path_factory) -> dict:
    """`bench probe --launcher slurm --json` in three allocations' shapes, each node's NVML the recorded one."""
    out = tmp_path_factory.mktemp("slurm-probe")
    smi = out / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncase \"$*\" in *--query-gpu=*) exec cat {REPO}/tests/fixtures/gpu/{SMI};; esac\n"
                   "echo 'this stand-in answers --query-gpu only' >&2; exit 9\n")
    smi.chmod(0o755)
    uneven = out / "uneven.hosts"
    uneven.write_text("node1 slots=2\nnode2 slots=1\nnode3 slots=2\n")
    env = dict(slurm_gpus.env, PATH=f"{smi.parent}:{slurm_gpus.env['PATH']}")
    probe = f"{sys.executable} -m bench probe --launcher slurm --json"
    n = str(len(slurm_gpus.nodes))
    runs = {
        # One allocation, two probes: its own slots (2 per node), and a hostfile's uneven ones.
        "per_task": ["salloc", "-N", n, "--ntasks-per-node=2", "--gpus-per-task=1", "sh", "-c",
                     f"{probe} > {out}/per_task.json && {probe} --hostfile {uneven} > {out}/uneven.json"],
        # Two tasks per node given one GPU between them.
        "shared": ["salloc", "-N", n, "--ntasks-per-node=2", "--gres=gpu:1", "sh", "-c", f"{probe} > {out}/shared.json"],
    }
    for name, argv in runs.items():
        proc = slurm_gpus.run(argv, cwd=REPO, timeout=300, env=env)
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
    return {name: json.loads((out / f"{name}.json").read_text()) for name in ("per_task", "uneven", "shared")}


def _slots_findings(doc: dict) -> list[dict]:
    return [f for f in doc["verdict"]["findings"] if f["code"] == "slots-beyond-gpus"]


def test_probe_runs_a_task_per_slot_and_sees_every_gpu_the_jobs_tasks_get(probed, slurm_gpus):
    doc = probed["per_task"]
    assert doc["unreachable"] == {} and [n["host"] for n in doc["nodes"]] == slurm_gpus.nodes
    for node in doc["nodes"]:
        # Each task was bound to its own GPU and kept only that one of the two NVML lists ...
        assert [(t["slurm_localid"], t["cuda_visible_devices"], t["pci_bus_ids"]) for t in node["probe_tasks"]] == [
            ("0", "0", BUSES[:1]), ("1", "1", BUSES[1:])], node["probe_tasks"]
        # ... and the node is the two, numbered as the slots are.
        assert [(g["index"], g["pci_bus_id"]) for g in node["gpus"]] == list(enumerate(BUSES))
        assert node["slots"] == [0, 1]
        # torch asked once per node (its arch list and CUDA are the node's), by the task the node is built on.
        assert [t["asked_torch"] for t in node["probe_tasks"]] == [True, False] and node["torch"] is not None
    assert _slots_findings(doc) == []


def test_probe_with_uneven_slots_places_the_tasks_by_the_hostfile(probed):
    doc = probed["uneven"]
    assert doc["unreachable"] == {}
    assert {n["host"]: (len(n["probe_tasks"]), len(n["gpus"])) for n in doc["nodes"]} == {
        "node1": (2, 2), "node2": (1, 1), "node3": (2, 2)}
    assert _slots_findings(doc) == []


def test_two_tasks_given_one_gpu_are_refused_by_the_gate(probed, slurm_gpus):
    doc = probed["shared"]
    for node in doc["nodes"]:
        assert [t["cuda_visible_devices"] for t in node["probe_tasks"]] == ["0", "0"]
        assert [g["pci_bus_id"] for g in node["gpus"]] == BUSES[:1]
    found = _slots_findings(doc)
    assert sorted(h for f in found for h in f["hosts"]) == slurm_gpus.nodes
    assert all(f["level"] == "fail" and "given 1 GPU(s)" in f["message"] for f in found)
