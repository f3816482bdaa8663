"""`bench hosts` as a user runs it: bench's CLI in this process, and as a process of its own for import checks.

No GPU exists here, so `nvidia-smi` is a script on PATH that prints recorded
real `nvidia-smi -L` output (below, with its source) or fails the way a
driverless node does.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cluster.accel.nvidia.smi import count_gpus
from tests.conftest import cli
from bench.render.hosts import _slot_text

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "deepspeed", "timm", "torchvision")

# Recorded `nvidia-smi -L` on 2 x A100-SXM4-80GB with MIG enabled, as published
# in a public MIG how-to (UUIDs as printed there). MIG lines must not count as GPUs.
NVIDIA_SMI_L_A100_MIG = """\
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40)
  MIG 1g.10gb     Device  0: (UUID: MIG-a686709d-6dc2-542a-8851-0d2508448c10)
  MIG 1g.10gb     Device  1: (UUID: MIG-53864714-0a66-5df2-9007-9268e30d9a72)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-c92e2d5d-4a69-f1cd-4df0-305f8606705a)
  MIG 1g.10gb     Device  0: (UUID: MIG-d5a46a2e-1d77-575d-99e3-1f96c8555a2e)
  MIG 1g.10gb     Device  1: (UUID: MIG-b8479d6e-d08f-5a92-9a24-0946db72b2a0)
"""
# What nvidia-smi prints (exit 9) on a node whose driver is not loaded.
NVIDIA_SMI_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def bench(*argv: str, env: dict[str, str] | None = None, cwd: Path = REPO):
    """`bench ARGV` in this process (tests.conftest.cli), env over this environment."""
    return cli(*argv, env={**os.environ, **(env or {})}, cwd=str(cwd))


def bench_process(*argv: str, python_flags=()):
    """`python [FLAGS] -m bench ARGV` as a process of its own (for -X importtime)."""
    return subprocess.run([sys.executable, *python_flags, "-m", "bench", *argv], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)


def fake_nvidia_smi(bindir: Path, stdout: str, rc: int = 0) -> dict[str, str]:
    bindir.mkdir(exist_ok=True)
    (bindir / "out.txt").write_text(stdout)
    script = bindir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 64\n/bin/cat "{bindir}/out.txt"\nexit {rc}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": str(bindir)}


def assert_bad_input(proc, fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fragment in lines[0], lines[0]


def test_json_is_one_document_in_hostfile_order():
    proc = bench("hosts", "--hostfile", "hostfiles/tesla", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == {
        "resources": {f"tesla-node{i}": [0] for i in range(1, 6)},
        "hostfile": "hostfiles/tesla",
        "nodes": 5,
        "world_size": 5,
    }
    assert list(doc["resources"]) == [f"tesla-node{i}" for i in range(1, 6)]


@pytest.mark.parametrize(
    "argv, resources",
    [
        (["--hostfile", "hostfiles/tesla", "--exclude", "tesla-node5"],
         {f"tesla-node{i}": [0] for i in range(1, 5)}),
        (["--hostfile", "hostfiles/vector", "--gpus", "1"],
         {f"vector-t4-0{i}": [0] for i in range(1, 5)}),
        (["--hostfile", "hostfiles/vector", "--include", "vector-t4-03:1,0@vector-t4-01:7"],
         {"vector-t4-01": [7], "vector-t4-03": [0, 1]}),
        (["--hostfile", "hostfiles/nebula", "--num-nodes", "1"], {"nebula-gpu01": [0, 1]}),
    ],
)
def test_filters_through_the_cli(argv, resources):
    proc = bench("hosts", *argv, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["resources"] == resources
    assert list(doc["resources"]) == list(resources)
    assert doc["nodes"] == len(resources)
    assert doc["world_size"] == sum(len(s) for s in resources.values())


def test_table_on_stdout():
    proc = bench("hosts", "--hostfile", "hostfiles/vector", "--exclude", "vector-t4-02:0,1,2,3,7")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "hosts: hostfiles/vector" in out
    assert "vector-t4-02" in out and "4-6" in out
    total = [line for line in out.splitlines() if "4 node(s)" in line]
    assert len(total) == 1 and total[0].split()[-2] == "27"  # 8 + 3 + 8 + 8 slots


def test_bad_hostfile_exits_2_with_one_line(tmp_path):
    hf = tmp_path / "dup"
    hf.write_text("n1 slots=1\n# comment\nn1 slots=2\n")
    assert_bad_input(bench("hosts", "--hostfile", str(hf), "--json"), f"{hf}:3: duplicate host 'n1'")


def test_proxycommand_hostfile_exits_2_and_runs_nothing(tmp_path):
    hf = tmp_path / "evil"
    hf.write_text("-oProxyCommand=touch${IFS}marker slots=1\n")
    proc = bench("hosts", "--hostfile", str(hf), cwd=tmp_path)
    assert_bad_input(proc, f"{hf}:1: bad host name '-oProxyCommand=touch${{IFS}}marker'")
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--hostfile", "no/such/hostfile"], "--hostfile: no such file 'no/such/hostfile'"),
        (["--hostfile", "hostfiles/tesla", "--include", "tesla-node9"], "--include: unknown host 'tesla-node9'"),
        (["--hostfile", "hostfiles/tesla", "--include", "tesla-node1", "--exclude", "tesla-node2"],
         "--exclude: cannot be combined with --include"),
        (["--hostfile", "hostfiles/tesla", "--num-nodes", "6"], "--num-nodes: 6 asked"),
        (["--hostfile", "hostfiles/tesla", "--num-nodes", "0"], "--num-nodes"),
        (["--include", "localhost:5"], "--include: host 'localhost' has no slot 5"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, fragment, tmp_path):
    # An empty PATH: no nvidia-smi, so "this machine" is localhost with 1 slot.
    assert_bad_input(bench("hosts", *argv, "--json", env={"PATH": str(tmp_path)}), fragment)


def test_this_machine_without_nvidia_smi(tmp_path):
    proc = bench("hosts", "--json", env={"PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "resources": {"localhost": [0]}, "hostfile": None, "nodes": 1, "world_size": 1
    }


@pytest.mark.process  # the stand-in nvidia-smi is a process
def test_this_machine_counts_gpus_not_mig_instances(tmp_path):
    env = fake_nvidia_smi(tmp_path / "bin", NVIDIA_SMI_L_A100_MIG)
    proc = bench("hosts", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["resources"] == {"localhost": [0, 1]}
    proc = bench("hosts", "--include", "localhost:1", "--json", env=env)
    assert json.loads(proc.stdout)["resources"] == {"localhost": [1]}


@pytest.mark.process
def test_this_machine_when_nvidia_smi_fails(tmp_path):
    env = fake_nvidia_smi(tmp_path / "bin", NVIDIA_SMI_NO_DRIVER + "\n", rc=9)
    proc = bench("hosts", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["resources"] == {"localhost": [0]}
    assert proc.stderr.splitlines() == [
        f"bench hosts: nvidia-smi -L exited 9 ({NVIDIA_SMI_NO_DRIVER}): 1 slot"
    ]


def _heavy_imports(importtime_stderr: str) -> list[str]:
    found = []
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name.split(".")[0] in HEAVY:
                found.append(name)
    return found


@pytest.mark.parametrize(
    "argv", [["hosts", "--help"], ["hosts", "--hostfile", "hostfiles/vector", "--gpus", "1"]]
)
@pytest.mark.process
def test_does_not_import_torch(argv):
    proc = bench_process(*argv, python_flags=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "import time:" in proc.stderr  # the check below saw real import records
    assert _heavy_imports(proc.stderr) == []


def test_count_gpus_on_recorded_outputs():
    assert count_gpus(NVIDIA_SMI_L_A100_MIG) == 2
    assert count_gpus("No devices were found\n") == 0
    assert count_gpus("") == 0


@pytest.mark.parametrize(
    "slots, text", [([0], "0"), ([0, 1, 2, 3], "0-3"), ([0, 2], "0,2"), ([0, 1, 2, 3, 6], "0-3,6"), ([1, 4, 5, 7], "1,4-5,7")]
)
def test_slot_text(slots, text):
    assert _slot_text(slots) == text
