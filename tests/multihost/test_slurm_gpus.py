"""Slurm's per-task GPU binding, on a real Slurm 22.05 whose nodes have GRES gpu:2 (plain files, slurm.py).

Nothing here is a GPU, but Slurm allocates the GRES and binds them to tasks as it would real ones, so
the environment every task gets is the real one. Under `--gpus-per-task=1`:
  - bench's training srun (bench.launch.slurm) gives each task one GPU while SLURM_LOCALID counts the
    node's tasks; bench.worker.bootstrap.bind_device makes LOCAL_RANK, which DeepSpeed reads as the device
    index (worker/dist.py says where), the index among the GPUs the task sees: 0 for every task;
Not yet here: the probe's one task per node under --gpus-per-task=1 sees one GPU (SLURM_GPUS_ON_NODE=1
with the allocation's environment, and still with SLURM_GPUS_PER_TASK dropped), and Slurm refuses a step
more GPUs per task than the job's ("Step requested gres_per_task=gpu:2 is more than the job's"): it needs
a task per slot, merged per node.
The real device binding (CUDA, DeepSpeed, NCCL) is benchmarks/gpu-check.sh's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

from . import netns
from .slurm import Slurm, build_slurm, slurm_possible

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

# Runs inside the allocation: bench's own srun argv for training and for the probe, each with a payload
# that prints what the task was given in place of the rank (no GPU can run one here).
DRIVER = r'''
import json, os, sys
from bench.launch.plan import build

nodes = os.environ["SLURM_JOB_NODELIST_EXPANDED"].split(",")
task = ("import json, os; from bench.worker.bootstrap import bind_device; "
        "seen = os.environ.get('CUDA_VISIBLE_DEVICES', ''); local = os.environ.get('SLURM_LOCALID'); "
        "launcher, index = bind_device(len([g for g in seen.split(',') if g])); "
        "print(json.dumps({'host': os.uname().nodename, 'localid': local, 'visible': seen, "
        "'launcher_local_rank': launcher, 'LOCAL_RANK': os.environ['LOCAL_RANK']}))")
lp = build({n: [0, 1] for n in nodes}, "slurm", sys.argv[1], "cuda", "10.0.0.1", 29500, environ=dict(os.environ))
argv = lp.argv[:lp.argv.index(sys.executable)] + [sys.executable, "-c", task]
train = __import__("subprocess").run(argv, capture_output=True, text=True, env={**os.environ, **lp.env}, timeout=60)
print(json.dumps({"argv": argv, "train": train.stdout, "train_err": train.stderr[-2000:]}))
'''


@pytest.fixture(scope="module")
def slurm_gpus(cluster: netns.Cluster) -> Iterator[Slurm]:
    missing = slurm_possible()
    if missing is not None:
        pytest.skip(missing)
    with build_slurm(cluster, gpus=2) as s:
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
    assert all(len(t["visible"].split(",")) == 1 for t in tasks), tasks
    assert sorted(t["localid"] for t in tasks) == ["0", "0", "0", "1", "1", "1"]
    # What bench makes of it before DeepSpeed starts: LOCAL_RANK 0 everywhere; the launcher's id is kept.
    assert {t["LOCAL_RANK"] for t in tasks} == {"0"}
    assert sorted(t["launcher_local_rank"] for t in tasks) == [0, 0, 0, 1, 1, 1]
