"""The GPUs a user chose are the GPUs the ranks use: --include slots and CUDA_VISIBLE_DEVICES, on one node.

No GPU exists here: `nvidia-smi` is a stand-in on PATH that prints recorded
real `nvidia-smi -L` output of a 2 x A100-SXM4-80GB node (tests/unit/
test_hosts_cmd.py, with its source), and every case is a dry run: it plans
and prints the exact command, launching nothing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat

import pytest

from tests.conftest import cli
from tests.unit.test_hosts_cmd import NVIDIA_SMI_L_A100_MIG

pytestmark = pytest.mark.process  # the stand-in nvidia-smi is a process


@pytest.fixture
def two_gpus(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "out.txt").write_text(NVIDIA_SMI_L_A100_MIG)
    script = bindir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 64\n/bin/cat "{bindir}/out.txt"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def _dry(env, *args):
    proc = cli("run", "--dry-run", "--dataset", "synthetic", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _world(doc) -> dict:
    """The world bench's node launcher is given (--world-info: base64 JSON of {host: GPU indices})."""
    word = re.search(r"--world-info=(\S+)", doc["command"]).group(1)
    return json.loads(base64.urlsafe_b64decode(word))


def test_cuda_visible_devices_here_is_the_gpus_the_ranks_get(two_gpus):
    doc = _dry({**two_gpus, "CUDA_VISIBLE_DEVICES": "1"})
    assert doc["plan"]["device"] == "cuda" and doc["plan"]["resources"] == {"localhost": [1]}
    assert _world(doc) == {"localhost": [1]}
    # DeepSpeed's runner would drop the variable and then take GPU 0: it never sees it, the world decides.
    assert "CUDA_VISIBLE_DEVICES" not in doc["command"] and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in doc["command"]


def test_slots_of_a_one_host_hostfile_are_kept(two_gpus, tmp_path):
    hf = tmp_path / "hf"
    hf.write_text("localhost slots=2\n")
    doc = _dry(two_gpus, "--hostfile", str(hf), "--include", "localhost:1")
    assert doc["plan"]["resources"] == {"localhost": [1]} and _world(doc) == {"localhost": [1]}
    both = cli("run", "--dry-run", "--dataset", "synthetic", "--hostfile", str(hf),
               env={**two_gpus, "CUDA_VISIBLE_DEVICES": "0"})
    assert both.returncode == 2 and "CUDA_VISIBLE_DEVICES" in both.stderr


@pytest.mark.parametrize("value,needle", [("GPU-9c73eb7b", "give indices"), ("5", "GPU 5 does not exist")])
def test_a_cuda_visible_devices_bench_cannot_follow_is_refused(two_gpus, value, needle):
    proc = cli("run", "--dry-run", "--dataset", "synthetic", env={**two_gpus, "CUDA_VISIBLE_DEVICES": value})
    assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
