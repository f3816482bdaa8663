"""`bench compare` on real runs: two healthy sets agree, a set slowed by a CPU quota is named.

Each healthy side is two real 2-rank CPU runs (gloo) into its own --out; the
slowed side is one run (so the threshold alone judges it), of bench inside
a cgroup v1 CPU quota of one core (a wrapper joins the cgroup, then execs
bench; the ranks inherit it), half of what the two ranks get otherwise. The healthy comparison uses a 25%
threshold: on this 2-core machine two sets of two runs differ by up to
about 15% (their spread is estimated from two runs each, which is rough).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, REPO, bench

pytestmark = pytest.mark.slow

RUN = ("--gpus", "2", "--dataset", "synthetic", *FAST, "--steps", "10", "--timing-warmup", "3", "--no-eval")
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
_WRAPPER = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); os.execv(sys.argv[2], sys.argv[2:])"


@contextlib.contextmanager
def one_core():
    if os.geteuid() != 0 or not (CPU_ROOT / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup v1 cpu controller")
    cg = CPU_ROOT / f"vitbench-compare-{os.getpid()}"
    cg.mkdir()
    (cg / "cpu.cfs_period_us").write_text("100000")
    (cg / "cpu.cfs_quota_us").write_text("100000")
    try:
        yield cg
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():  # only what this test put there
            with contextlib.suppress(OSError):
                (CPU_ROOT / "cgroup.procs").write_text(pid)
        cg.rmdir()


def runs(out: Path, cgroup: Path | None = None, n: int = 2) -> str:
    for _ in range(n):
        argv = [sys.executable, "-m", "bench", *RUN, "--out", str(out)]
        if cgroup is not None:
            argv = [sys.executable, "-c", _WRAPPER, str(cgroup / "cgroup.procs"), *argv]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return str(out)


def test_healthy_runs_agree_and_a_slowed_set_is_named(tmp_path):
    base = runs(tmp_path / "base")
    again = runs(tmp_path / "again")
    with one_core() as cg:
        slow = runs(tmp_path / "slow", cg, n=1)  # about 2x slower: one run says it (no spread on that side)
    same = bench("compare", base, again, "--threshold", "25%", "--json")
    assert same.returncode == 0, same.stderr + same.stdout[-2000:]
    doc = json.loads(same.stdout)
    (ips,) = [r for r in doc["rows"] if r["figure"] == "images_per_s"]
    assert ips["base"]["n"] == 2 and ips["new"]["n"] == 2 and ips["spread"] is not None
    worse = bench("compare", base, slow, "--threshold", "25%")
    assert worse.returncode == 1, worse.stderr
    (line,) = [x for x in worse.stderr.splitlines() if x.startswith("bench compare: regressed:")]
    assert line.startswith("bench compare: regressed: run vit-micro-p4-32 x2: images_per_s -"), line
    print(f"\nhealthy: {ips['change']:+.1%} (spread {ips['spread']:.1%}); slowed: {line}")
