"""Shared test helpers: run `bench` as a real process, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(*args: str, timeout: float = 600, env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -m bench ARGS` and return the finished process (text output)."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd or REPO)


def one_json(stdout: str) -> dict:
    """stdout must hold exactly one JSON document and nothing else."""
    return json.loads(stdout)


def assert_bad_input(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, one stderr line naming the option/file, no traceback, nothing on stdout."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


# Small, fast runs for the tests: the smallest preset, a small synthetic set.
FAST = ("--model", "vit-micro-p4-32", "--synthetic-size", "512", "--micro-batch", "16")


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "results")
