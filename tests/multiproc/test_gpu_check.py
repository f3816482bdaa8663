"""benchmarks/gpu-check.sh at its smallest: its plan, its first check refusing a driver too old for torch's CUDA,
and one section's dry run on CPU (issue 48 item 4).

No GPU here. The driver is a stand-in `nvidia-smi` first on PATH answering the one query the check makes with
the driver of the recorded 8x H100 node (tests/fixtures/health/nvidia-smi-q_h100x8_gpu2-sw-power-cap-sw-thermal-
active.txt: Driver Version 535.183.01) beside the suite's own torch 2.14.1+cu130: CUDA 13.x needs a driver >= 580
(NVIDIA's minor version compatibility table), so the check must stop the run in one line before any section.
The dry run is the copies section (the code that had never run: validate's copies and memory) on one CPU rank.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = os.path.join(REPO, "benchmarks", "gpu-check.sh")


def gpu_check(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, "PY": sys.executable, **(env or {})})


def test_the_plan_names_the_sections_in_order_with_budgets_and_the_default_run_fits_one_device_call():
    proc = gpu_check("--plan")
    assert proc.returncode == 0, proc.stderr
    rows = re.findall(r"^\s+(\d+)\s+(\w+)\s+(\d+) s\s+(.*)$", proc.stdout, re.M)
    assert [name for _, name, _, _ in rows] == ["check", "copies", "burn", "dcgm", "numerics", "comm", "hang", "tp",
                                                "cases", "issue21"]   # the never-run code first
    budgets = {name: int(s) for _, name, s, _ in rows}
    default = re.search(r"^this run: ([\w ]+): (\d+) s", proc.stdout, re.M)
    assert default.group(1).split() == ["check", "copies", "burn", "dcgm"]
    assert int(default.group(2)) == sum(budgets[n] for n in default.group(1).split()) < 9 * 60
    calls = re.findall(r"--only ([\w,]+)\s+# (\d+) s", proc.stdout)
    assert all(int(s) < 9 * 60 for _, s in calls)
    assert sorted(n for names, _ in calls for n in names.split(",")) == sorted(set(budgets) - set(
        default.group(1).split()))
    only = gpu_check("--plan", "--only", "copies,burn")
    assert re.search(r"^this run: check copies burn: 330 s", only.stdout, re.M)
    bad = gpu_check("--only", "copies,bogus")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "gpu-check: --only: no section 'bogus' (check copies burn dcgm numerics comm hang tp cases issue21)"]


def test_a_driver_too_old_for_torch_s_cuda_stops_the_run_in_one_line(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in *driver_version*) echo "535.183.01" ;; *) exit 9 ;; esac\n')
    smi.chmod(0o755)
    proc = gpu_check("--only", "copies", str(tmp_path / "out"),
                     env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpu-check:")]
    assert line.startswith("gpu-check: driver 535.183.01 cannot run torch 2.14.1+cu130 (CUDA 13.0 needs a driver >= "
                           "580: docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html)")
    assert "## check (budget 20 s)" in proc.stdout and "## copies" not in proc.stdout


def test_the_copies_section_s_dry_run_on_cpu(tmp_path):
    proc = gpu_check("--dry-run", "--only", "copies", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "## copies (budget 450 s: the H100's 150 s x 3 on CPU)" in proc.stdout
    assert "[ok] copies and memory rows for the GPU" in proc.stdout
    assert "[WRONG]" not in proc.stdout and "stopped at its budget" not in proc.stdout
    assert re.search(r"^   copies: \d+ s of its 450 s$", proc.stdout, re.M)


def test_both_scripts_parse_every_section_included():
    """bash -n over gpu-check.sh and the sections it sources (benchmarks/gpu-check-sections.sh): the suite runs only
    the plan, the check and the copies section's dry run, so a syntax error in another section would first show on
    a lent GPU, inside its one device call."""
    for name in ("gpu-check.sh", "gpu-check-sections.sh"):
        proc = subprocess.run(["bash", "-n", os.path.join(REPO, "benchmarks", name)], capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stderr == "", (name, proc.stderr)
