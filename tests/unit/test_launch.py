"""bench.launch: the runner argv per launcher, the files it needs, and a Slurm allocation's hosts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import launch
from bench.errors import BadInput

HOSTS = {"10.0.0.1": [0, 1], "10.0.0.2": [0, 1]}
ENV = {"PATH": "/usr/bin:/bin", "GLOO_SOCKET_IFNAME": "ib0", "HOME": "/root"}


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
    assert launch.tasks_per_node(spec) == counts


def test_tasks_per_node_refuses_garbage():
    with pytest.raises(BadInput, match="SLURM_TASKS_PER_NODE"):
        launch.tasks_per_node("2(y3)")


def test_slurm_hosts_outside_an_allocation():
    with pytest.raises(BadInput, match="not inside a Slurm allocation"):
        launch.slurm_hosts({"PATH": "/usr/bin:/bin"})
