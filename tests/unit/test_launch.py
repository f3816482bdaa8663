"""bench.launch: the launcher argv per launcher (one exact-argv test per launcher class), the files it needs, and a Slurm allocation's hosts."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from bench.core import config
from bench.launch.base import Job
from bench.launch.local import Local
from bench.launch.openmpi import OpenMPI
from bench.launch.pdsh import Pdsh
from bench.launch.registry import LAUNCHERS, MULTI_HOST_DEFAULT, default_for
from bench.launch.slurm import Slurm

from bench.cluster import slurm
from bench.launch import plan as launch
from bench.core.errors import BadInput

HOSTS = {"10.0.0.1": [0, 1], "10.0.0.2": [0, 1]}
ENV = {"PATH": "/usr/bin:/bin", "GLOO_SOCKET_IFNAME": "ib0", "HOME": "/root"}


RUN = "/results/run-1"
PY = sys.executable
NODE_LAUNCHER = [PY, "-u", "-m", "bench.launch.node"]


def _job(resources, **kw) -> Job:
    return Job(resources=resources, run_dir=RUN, device="cpu", master_addr="10.0.0.1", master_port=29501,
               module="bench.worker", environ=dict(ENV), rank_env={"OMP_NUM_THREADS": "1"}, **kw)


# --- one exact argv per launcher class (ReFrame's JobLauncher.command() test) -----------------

def _world(hosts: dict) -> str:
    return "--world-info=" + base64.urlsafe_b64encode(json.dumps(hosts).encode()).decode()


def test_local_command_is_exactly():
    assert Local().command(_job({"localhost": [0, 1]}, )) == [
        *NODE_LAUNCHER, _world({"localhost": [0, 1]}), "--master-addr=10.0.0.1", "--master-port=29501",
        "bench.worker", "--run-dir", RUN]
    gpu = Job(resources={"localhost": [0, 2]}, run_dir=RUN, device="cuda", master_addr="127.0.0.1", master_port=1,
              module="bench.worker", environ={}, rank_env={})
    assert Local().command(gpu)[4] == _world({"localhost": [0, 2]})  # the GPUs by index, as --include gave them
    cpu = _job({"node1": [3, 5]})  # CPU slots are a count, whatever the host is called
    assert Local().command(cpu)[4] == _world({"localhost": [0, 1]})


def test_pdsh_command_is_exactly():
    job = _job({"a": [1], "b": [0]})
    assert Pdsh().command(job) == [
        "pdsh", "-S", "-f", "1024", "-w", "a,b",
        f"export PYTHONPATH={RUN}; export OMP_NUM_THREADS=1; cd {RUN}; " + shlex.join([
            *NODE_LAUNCHER, _world({"a": [1], "b": [0]}), "--node-rank=%n", "--master-addr=10.0.0.1",
            "--master-port=29501", "bench.worker", "--run-dir", RUN])]
    assert Pdsh().environment(job) == {"DS_ENV_FILE": f"{RUN}/.deepspeed_env", "PDSH_RCMD_TYPE": "ssh"}


def test_pdsh_holds_every_host_in_its_window_and_asks_for_the_descriptors_they_take():
    """Every host's ssh lives as long as its ranks: pdsh's window (-f) must hold them all, or the hosts past it
    start only as ranks end. 1024 (DeepSpeed's) while they fit; 8 descriptors a host asked of the soft limit."""
    hosts = {f"n{i:04d}": [0] for i in range(2000)}
    argv = Pdsh().command(_job(hosts))
    assert argv[:4] == ["pdsh", "-S", "-f", "2000"] and argv[5].count(",") == 1999
    assert Pdsh().command(_job({f"n{i}": [0] for i in range(1000)}))[3] == "1024"
    assert Pdsh().open_files(_job(hosts)) == 8 * 2000 + 64
    assert OpenMPI().open_files(_job(HOSTS)) == 0


@pytest.mark.process
def test_the_soft_limit_on_open_files_is_raised_for_the_launcher_never_lowered_nor_past_the_hard_limit():
    import subprocess
    import sys

    code = ("import resource; from bench.cluster.remote import raise_open_files as r; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096)); "
            "print(r(8064), r(100), r(100000), resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:3] == ["4096", "4096", "4096"] and out[3:] == ["(4096,", "4096)"]


def test_openmpi_command_is_exactly():
    assert OpenMPI().command(_job(HOSTS)) == [
        "mpirun", "-n", "4", "-hostfile", f"{RUN}/hostfile", "--mca", "btl", "^openib",
        "--bind-to", "none", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0",
        "-x", "UCX_TLS=tcp", "-x", f"PYTHONPATH={RUN}", "-x", "OMP_NUM_THREADS=1",
        PY, "-u", "-m", "bench.worker", "--run-dir", RUN]
    # No interface named: DeepSpeed's default, before bench's options.
    bare = dataclasses.replace(_job(HOSTS), environ={"PATH": "/usr/bin"})
    assert OpenMPI().command(bare)[7:15] == ["^openib", "--mca", "btl_tcp_if_include", "eth0", "--bind-to", "none",
                                            "--oversubscribe", "-x"]


def test_slurm_command_is_exactly():
    job = _job({"n1": [0, 2], "n2": [1]})
    assert Slurm().command(job) == [
        "srun", "-n", "3", "--nodes", "2", "--distribution=arbitrary", "--kill-on-bad-exit=1", "--export=ALL",
        PY, "-u", "-m", "bench.worker", "--run-dir", RUN]
    # Each task's node, in rank order: any count a node, any slots (bench validate leaves a GPU out by slot).
    assert Slurm().files(job) == {f"{RUN}/slurm-tasks": "n1\nn1\nn2\n"}
    assert Slurm().environment(job) == {"SLURM_HOSTFILE": f"{RUN}/slurm-tasks"}


def test_an_independent_job_is_not_ended_by_one_ranks_exit_under_any_launcher():
    """bench validate's per-GPU run and the numerics job (Job.independent): srun keeps going (said, so a site's
    KillOnBadExit=1 does not apply), mpirun does not abort on a non-zero exit and each rank runs under the node
    launcher (--alone: mpirun 4.1.4 would wait forever for a rank a signal ended), the node launcher stops none
    of a node's ranks for another's exit. Training's jobs keep the kill (test_*_command_is_exactly)."""
    job = _job({"n1": [0, 2], "n2": [1]}, independent=True)
    assert Slurm().command(job) == [
        "srun", "-n", "3", "--nodes", "2", "--distribution=arbitrary", "--kill-on-bad-exit=0", "--export=ALL",
        PY, "-u", "-m", "bench.worker", "--run-dir", RUN]
    assert OpenMPI().command(dataclasses.replace(_job(HOSTS), independent=True)) == [
        "mpirun", "-n", "4", "-hostfile", f"{RUN}/hostfile", "--mca", "btl", "^openib",
        "--bind-to", "none", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0",
        "--mca", "orte_abort_on_non_zero_status", "0",
        "-x", "UCX_TLS=tcp", "-x", f"PYTHONPATH={RUN}", "-x", "OMP_NUM_THREADS=1",
        *NODE_LAUNCHER, "--alone", "bench.worker", "--run-dir", RUN]
    assert Local().command(_job({"localhost": [0, 1]}, independent=True)) == [
        *NODE_LAUNCHER, _world({"localhost": [0, 1]}), "--master-addr=10.0.0.1", "--master-port=29501",
        "--independent", "bench.worker", "--run-dir", RUN]
    assert Pdsh().command(_job({"a": [1], "b": [0]}, independent=True))[-1].endswith(shlex.join([
        *NODE_LAUNCHER, _world({"a": [1], "b": [0]}), "--node-rank=%n", "--master-addr=10.0.0.1",
        "--master-port=29501", "--independent", "bench.worker", "--run-dir", RUN]))
    # Through the plan: validate's per-GPU run asks for it by Mode(independent=True) (bench.jobs.train).
    lp = launch.build({"n1": [0], "n2": [0]}, "slurm", RUN, "cpu", master_port=29501, environ=ENV, independent=True)
    assert "--kill-on-bad-exit=0" in lp.argv
    assert "--kill-on-bad-exit=1" in launch.build({"n1": [0], "n2": [0]}, "slurm", RUN, "cpu", master_port=29501,
                                                  environ=ENV).argv


def test_registry_names_the_configs_launchers_and_nothing_else_compares_a_name():
    assert tuple(LAUNCHERS) == config.LAUNCHERS
    assert default_for(1) == "local" and default_for(2) == MULTI_HOST_DEFAULT
    assert [n for n, c in LAUNCHERS.items() if not c.stop_with_sigterm] == ["pdsh"]
    assert {n: c.probe_via for n, c in LAUNCHERS.items()} == {
        "local": "local", "pdsh": "ssh", "openmpi": "openmpi", "slurm": "slurm"}
    # Outside bench/launch (and cluster's probe methods) a launcher is a name in a config,
    # never a string compared in code: what differs per launcher is an attribute of its class.
    pkg = Path(__file__).resolve().parents[2] / "bench"
    for path in pkg.rglob("*.py"):
        if "launch" in path.parts or "cluster" in path.parts:
            continue
        for name in ("pdsh", "openmpi", "slurm", "local"):
            assert not re.search(rf"==\s*[\"']{name}[\"']|[\"']{name}[\"']\s*==|!=\s*[\"']{name}[\"']",
                                 path.read_text()), (path, name)


def _tail(argv: list[str], after: str) -> list[str]:
    return argv[argv.index(after) + 1:]


def test_openmpi_names_the_ranks_interface_only_for_btl(tmp_path):
    lp = launch.build(HOSTS, "openmpi", str(tmp_path), "cpu", master_port=29501, environ=ENV)
    assert lp.argv[8:16] == ["--bind-to", "none", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0", "-x",
                             "UCX_TLS=tcp"]
    assert "eth0" not in lp.argv and "oob_tcp_if_include" not in lp.argv
    assert lp.env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and lp.env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert lp.argv[-5:] == ["-u", "-m", "bench.worker", "--run-dir", str(tmp_path)]
    assert "--include" not in lp.argv  # the hostfile is resolved: each host's chosen slot count
    # The ranks' variables travel as mpirun's -x, whole (no quotes around a value with ^ or a comma).
    env = dict(ENV, NCCL_SOCKET_IFNAME="^lo,docker", GLOO_SOCKET_IFNAME="ib0")
    gpu = launch.build(HOSTS, "openmpi", str(tmp_path), "cuda", environ=env)
    exported = [gpu.argv[i + 1] for i, a in enumerate(gpu.argv) if a == "-x"]
    assert "NCCL_SOCKET_IFNAME=^lo,docker" in exported and "GLOO_SOCKET_IFNAME=ib0" in exported


def test_secret_named_variables_are_never_words_of_a_launch_command(tmp_path):
    # The exports are argv words (plan.json keeps the command; `ps` shows it): a secret stays in this shell.
    env = dict(ENV, MLFLOW_TRACKING_PASSWORD="hunter2", MLFLOW_TRACKING_URI="http://mlflow:5000",
               PYTHON_TOKEN="t0k3n")
    for name in ("pdsh", "openmpi"):
        lp = launch.build(HOSTS, name, str(tmp_path), "cpu", environ=env)
        words = " ".join(lp.argv)
        assert "hunter2" not in words and "t0k3n" not in words, name
        assert "MLFLOW_TRACKING_URI=http://mlflow:5000" in words, name  # what is no secret still travels


def test_pdsh_gets_the_exact_slots_and_the_env_file(tmp_path):
    lp = launch.build({"a": [1], "b": [0]}, "pdsh", str(tmp_path), "cpu", environ=ENV)
    assert _world({"a": [1], "b": [0]}) in lp.argv[-1]  # each host's chosen slots, as --include a:1@b:0 gave
    assert lp.env["DS_ENV_FILE"] == str(tmp_path / ".deepspeed_env")
    launch.write_files(lp, {"a": [1], "b": [0]}, {"a": 2, "b": 1})
    assert (tmp_path / "hostfile").read_text() == "a slots=2\nb slots=1\n"
    lines = (tmp_path / ".deepspeed_env").read_text().splitlines()
    assert "GLOO_SOCKET_IFNAME=ib0" in lines and "DS_ACCELERATOR=cpu" in lines
    assert all("=" in line and not line.startswith("#") for line in lines)


def test_slurm_ranks_get_comma_values_whole_through_sruns_own_environment(tmp_path):
    # DeepSpeed's SlurmRunner would write --export=ALL,NCCL_IB_HCA=mlx5_0,mlx5_1 and srun splits at commas.
    env = dict(ENV, NCCL_IB_HCA="mlx5_0,mlx5_1", NCCL_SOCKET_IFNAME="^lo,docker")
    lp = launch.build(HOSTS, "slurm", str(tmp_path), "cpu", master_addr="10.0.0.1", environ=env)
    assert [a for a in lp.argv if a.startswith("--export")] == ["--export=ALL"]
    assert lp.env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and lp.env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert lp.env_file == {} and "DS_ENV_FILE" not in lp.env
    assert "--kill-on-bad-exit=1" in lp.argv and lp.argv[-4:] == ["-m", "bench.worker", "--run-dir", str(tmp_path)]


def test_local_gpus_are_the_chosen_ones_and_the_shells_choice_is_not_copied_to_other_nodes(tmp_path):
    # The world's slots (or CUDA_VISIBLE_DEVICES=4,5 here) are what the node launcher gives the ranks.
    env = dict(ENV, CUDA_VISIBLE_DEVICES="4,5")
    lp = launch.build({"localhost": [4, 5]}, "local", str(tmp_path), "cuda", environ=env)
    assert _world({"localhost": [4, 5]}) in lp.argv
    assert "CUDA_VISIBLE_DEVICES" not in lp.env and lp.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    cpu = launch.build({"localhost": [0, 1]}, "local", str(tmp_path), "cpu", environ=env)
    assert _world({"localhost": [0, 1]}) in cpu.argv
    mpi = launch.build(HOSTS, "openmpi", str(tmp_path), "cuda", environ=env)
    assert "CUDA_VISIBLE_DEVICES" not in mpi.env_file and mpi.env_file["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_slurm_and_mpirun_take_picked_slots_and_write_where_each_rank_goes(tmp_path):
    for name in ("slurm", "openmpi"):
        lp = launch.build({"n1": [1], "n2": [0, 1]}, name, str(tmp_path), "cpu", environ=ENV)
        assert lp.gpu_by == "slot"
        launch.write_files(lp, {"n1": [1], "n2": [0, 1]}, None)
        plan = launch.plan_json(lp, {"n1": [1], "n2": [0, 1]}, "cuda", 60)
        assert plan["gpu_by"] == "slot"
    assert (tmp_path / "slurm-tasks").read_text() == "n1\nn2\nn2\n"
    assert launch.build({"n1": [1]}, "pdsh", str(tmp_path), "cpu", environ=ENV).gpu_by == "local_rank"


@pytest.mark.parametrize("spec,counts", [("1(x3)", [1, 1, 1]), ("4", [4]), ("2(x3),1", [2, 2, 2, 1]),
                                         ("8(x2),4(x1)", [8, 8, 4])])
def test_tasks_per_node(spec, counts):
    assert slurm.tasks_per_node(spec) == counts


def test_tasks_per_node_refuses_garbage():
    with pytest.raises(BadInput, match="SLURM_TASKS_PER_NODE"):
        slurm.tasks_per_node("2(y3)")


def test_slurm_hosts_outside_an_allocation():
    with pytest.raises(BadInput, match="not inside a Slurm allocation"):
        slurm.slurm_hosts({"PATH": "/usr/bin:/bin"})


def test_a_rank_takes_its_local_rank_where_deepspeed_chose_the_gpus_and_its_slot_where_it_sees_them_all():
    from bench.core.placement import BY_LOCAL_RANK, BY_SLOT, gpu_index

    res = {"n1": [0, 2, 3], "n2": [1]}
    by_local = {"gpu_by": BY_LOCAL_RANK, "resources": res}
    # DeepSpeed's launcher on a node: every rank sees the node's chosen GPUs and takes its own.
    assert [gpu_index(by_local, r, r, 4) for r in range(4)] == [0, 1, 2, 3]
    # srun --gpus-per-task=1: every task sees one GPU (cuda:0) while SLURM_LOCALID counts 0..3.
    assert [gpu_index(by_local, r, r, 1) for r in range(4)] == [0, 0, 0, 0]
    assert gpu_index(by_local, 0, 0, 0) == 0
    # mpirun or srun showing every GPU of the node: rank r takes its planned slot (slot 1 of n1 left out).
    by_slot = {"gpu_by": BY_SLOT, "resources": res}
    assert [gpu_index(by_slot, r, local, 4) for r, local in ((0, 0), (1, 1), (2, 2), (3, 0))] == [0, 2, 3, 1]
    # Leading slots under per-task binding still work; a left-out slot Slurm did not show is refused.
    assert gpu_index({"gpu_by": BY_SLOT, "resources": {"n1": [0, 1]}}, 1, 1, 1) == 0
    with pytest.raises(ValueError, match="slot 2 of n1 is not among the 1 GPU"):
        gpu_index(by_slot, 1, 1, 1)
