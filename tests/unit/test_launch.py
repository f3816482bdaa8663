"""bench.launch: the runner argv per launcher (one exact-argv test per launcher class), the files it needs, and a Slurm allocation's hosts."""

from __future__ import annotations

import os
import re
import subprocess
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
RUNNER = [PY, "-u", "-m", "deepspeed.launcher.runner"]


def _job(resources, **kw) -> Job:
    return Job(resources=resources, run_dir=RUN, device="cpu", master_addr="10.0.0.1", master_port=29501,
               module="bench.worker", environ=dict(ENV), rank_env={"OMP_NUM_THREADS": "1"}, **kw)


# --- one exact argv per launcher class (ReFrame's JobLauncher.command() test) -----------------

def test_local_command_is_exactly():
    assert Local().command(_job({"localhost": [0, 1]}, )) == [
        *RUNNER, "--hostfile", f"{RUN}/no-hostfile", "--num_gpus", "2", "--master_addr", "10.0.0.1",
        "--master_port", "29501", "--module", "bench.worker", "--run-dir", RUN]


def test_pdsh_command_is_exactly():
    activate = ["--venv_script", os.path.join(os.path.dirname(PY), "activate")] \
        if os.path.isfile(os.path.join(os.path.dirname(PY), "activate")) else []
    assert Pdsh().command(_job({"a": [1], "b": [0]})) == [
        *RUNNER, "--hostfile", f"{RUN}/hostfile", "--launcher", "pdsh", "--master_addr", "10.0.0.1",
        "--master_port", "29501", "--include", "a:1@b:0", "--no_ssh_check", *activate,
        "--module", "bench.worker", "--run-dir", RUN]


def test_openmpi_command_is_exactly():
    assert OpenMPI().command(_job(HOSTS)) == [
        *RUNNER, "--hostfile", f"{RUN}/hostfile", "--launcher", "openmpi", "--master_addr", "10.0.0.1",
        "--master_port", "29501", "--launcher_args", "--bind-to none --oversubscribe --mca btl_tcp_if_include ib0",
        "--module", "bench.worker", "--run-dir", RUN]


def test_slurm_command_is_exactly():
    assert Slurm().command(_job({"n1": [0, 1]})) == [
        *RUNNER, "--hostfile", f"{RUN}/hostfile", "--launcher", "slurm", "--master_addr", "10.0.0.1",
        "--master_port", "29501", "--force_multi", "--no_ssh_check", "--include", "n1:0,1",
        f"{RUN}/rank_entry.py", "--run-dir", RUN]


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
    args = lp.argv[lp.argv.index("--launcher_args") + 1].split()
    assert args == ["--bind-to", "none", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0"]
    assert lp.env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and lp.env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert _tail(lp.argv, "--launcher_args")[1:] == ["--module", "bench.worker", "--run-dir", str(tmp_path)]
    assert "--include" not in lp.argv  # DeepSpeed's openmpi runner refuses it; the hostfile is resolved


def test_pdsh_gets_the_exact_slots_and_the_env_file(tmp_path):
    lp = launch.build({"a": [1], "b": [0]}, "pdsh", str(tmp_path), "cpu", environ=ENV)
    assert _tail(lp.argv, "--include")[:2] == ["a:1@b:0", "--no_ssh_check"]
    assert lp.env["DS_ENV_FILE"] == str(tmp_path / ".deepspeed_env")
    launch.write_files(lp, {"a": [1], "b": [0]}, {"a": 2, "b": 1})
    assert (tmp_path / "hostfile").read_text() == "a slots=2\nb slots=1\n"
    lines = (tmp_path / ".deepspeed_env").read_text().splitlines()
    assert "GLOO_SOCKET_IFNAME=ib0" in lines and "DS_ACCELERATOR=cpu" in lines
    assert all("=" in line and not line.startswith("#") for line in lines)


@pytest.mark.process
def test_slurm_ranks_start_from_a_script_that_runs_the_module(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lp = launch.build(HOSTS, "slurm", str(run_dir), "cpu", master_addr="10.0.0.1", environ=ENV,
                      module="probe_mod")
    entry = str(run_dir / "rank_entry.py")
    assert "--module" not in lp.argv  # DeepSpeed's slurm runner would run `python -u probe_mod`
    assert _tail(lp.argv, "--include")[:1] == ["10.0.0.1:0,1@10.0.0.2:0,1"]
    assert lp.argv[-3:] == [entry, "--run-dir", str(run_dir)]
    launch.write_files(lp, HOSTS, None)
    (tmp_path / "probe_mod").mkdir()
    (tmp_path / "probe_mod" / "__main__.py").write_text("import sys; print(__name__, sys.argv[1:])\n")
    out = subprocess.run([sys.executable, "-u", entry, "--run-dir", "X"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "__main__ ['--run-dir', 'X']\n"


def test_slurm_refuses_picked_slots(tmp_path):
    with pytest.raises(BadInput, match="--launcher slurm: cannot select slots"):
        launch.build({"n1": [1]}, "slurm", str(tmp_path), "cpu", environ=ENV)


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
