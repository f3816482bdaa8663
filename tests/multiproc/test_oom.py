"""A batch that does not fit in memory is recorded as `oom`, and a sweep moves on.

bench runs inside a cgroup v1 memory cgroup of its own with a hard limit
(a wrapper writes its PID to cgroup.procs, then execs bench; every process
bench starts inherits the cgroup), the way a container or a Slurm job
bounds it. On CPU, Linux overcommits: the rank's allocation succeeds and the
kernel's OOM killer SIGKILLs it when the pages are touched, so the rank
writes no report. bench reads the cgroup's `oom_kill` counter before and
after the run (bench/memcg.py) and records `oom` only when that counter
rose and a rank stopped without a report; a rank that catches
MemoryError / "can't allocate memory" itself reports `oom` directly.

The same sweep without the limit (both points ok) is then the baseline of
`bench compare`: the point that went from ok to oom is a regression, exit 1,
named with the oom record's reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.core import results
from tests.conftest import REPO, one_json

pytestmark = pytest.mark.slow

MEMCG_ROOT = Path("/sys/fs/cgroup/memory")
# Enough for bench, its node launcher and one rank of vit-micro at batch 16
# (the rank's peak RSS 0.85 GiB, shared libraries included; bench and the node
# launcher import no torch: tens of MiB), far from batch 1024's (the rank's
# peak RSS 2.95 GiB). 2.5 GiB served while DeepSpeed's runner and launch.py,
# each holding torch, ran inside the limit too; without them batch 1024 fitted
# under it in one of two suite runs (the libraries' pages already in the page cache
# are charged to whoever read them first).
LIMIT = 7 << 28  # 1.75 GiB
BIG, SMALL = 1024, 16

# Joins the cgroup, then becomes the command: nothing runs outside the limit.
_WRAPPER = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); os.execv(sys.argv[2], sys.argv[2:])"


def _own_memcg() -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return MEMCG_ROOT / path.lstrip("/")
    except OSError:
        pass
    return None


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A child of our own memory cgroup with a hard limit; its processes are killed at the end."""
    parent = _own_memcg()
    if os.geteuid() != 0 or parent is None or not (parent / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup v1 memory controller (/sys/fs/cgroup/memory)")
    cg = parent / f"vitbench-oom-{os.getpid()}-{time.monotonic_ns()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):  # no swap accounting: then there is no swap to escape to either
            (cg / "memory.memsw.limit_in_bytes").write_text(str(limit))
        yield cg
    finally:
        for _ in range(50):
            pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        cg.rmdir()


def _oom_kills(cg: Path) -> int:
    for line in (cg / "memory.oom_control").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return -1


def _sweep(out: Path, cgroup: Path | None) -> subprocess.CompletedProcess:
    """bench sweep batch over BIG and SMALL into out, inside `cgroup` (None: bench's own, unlimited). One step a
    point: nothing here is timed, and BIG runs out of memory in its first step (in the unlimited baseline, that
    step alone takes ~20 s of a core; each further one ~9 s)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "bench", "sweep", "batch", "--gpus", "1", "--dataset", "synthetic",
            "--model", "vit-micro-p4-32", "--synthetic-size", str(BIG), "--micro-batches", f"{BIG},{SMALL}",
            "--steps", "1", "--timing-warmup", "0", "--no-eval", "--timeout", "300", "--out", str(out), "--json"]
    if cgroup is not None:
        argv = [sys.executable, "-c", _WRAPPER, str(cgroup / "cgroup.procs"), *argv]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def under_limit(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, int]:
    """The sweep run once under the memory limit, for both tests: (its --out, the process, OOM kills seen)."""
    out = tmp_path_factory.mktemp("oom") / "out"
    with memory_cgroup(LIMIT) as cg:
        proc = _sweep(out, cg)
        kills = _oom_kills(cg)
    return out, proc, kills


def test_batch_that_does_not_fit_is_oom_and_the_sweep_moves_on(under_limit) -> None:
    out, proc, kills = under_limit
    # Exit 0: every point is ok or oom (an OOM is a result, not a failure of the sweep).
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = one_json(proc.stdout)
    assert [p["status"] for p in summary["points"]] == ["oom", "ok"], summary
    recs = results.read(str(out / "batch" / "results.jsonl")).records
    for r in recs:
        results.validate(r)
    big, small = recs
    assert big["status"] == "oom" and big["config"]["micro_batch"] == BIG
    assert small["status"] == "ok" and small["config"]["micro_batch"] == SMALL
    err = big["error"]
    assert err["rank"] == 0 and err["host"]
    if kills > 0:
        # The kernel killed the rank: bench says so from its cgroup's counter.
        assert "OOM killer" in err["reason"] and "memory cgroup" in err["reason"], err
    else:
        # The rank caught the failed allocation itself.
        assert "memory" in err["reason"].lower(), err
    # The point's own run dir holds the run record, status oom as well.
    run_rec = results.read(os.path.join(big["run_dir"], "results.jsonl")).records
    assert [r["status"] for r in run_rec] == ["oom"]
    print(f"oom path: {'kernel OOM killer' if kills > 0 else 'allocation error in the rank'}: {err['reason']}")


def test_compare_names_the_point_that_went_from_ok_to_oom(under_limit, tmp_path: Path) -> None:
    """The same sweep without the limit is the baseline: both points ok there, so BIG's oom is a regression."""
    new, _, _ = under_limit
    base = tmp_path / "base"
    proc = _sweep(base, None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [p["status"] for p in one_json(proc.stdout)["points"]] == ["ok", "ok"]
    cmp = subprocess.run([sys.executable, "-m", "bench", "compare", str(base), str(new), "--threshold", "50%"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert cmp.returncode == 1, cmp.stderr + cmp.stdout
    (line,) = [x for x in cmp.stderr.splitlines() if x.startswith("bench compare: regressed:")]
    big = results.read(str(new / "batch" / "results.jsonl")).records[0]
    assert f"mb={BIG}/" in big["point_id"]
    assert line.startswith(f"bench compare: regressed: batch {big['point_id']}: ok x1 -> oom: "), line
    assert big["error"]["reason"] in line and f"rank 0 on {big['error']['host']}" in line
    print(f"\n{line}")
