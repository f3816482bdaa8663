"""Ctrl-C and stray ranks: bench stops every rank it started, by PID, and keeps what finished.

    test_cleanup_*   bench.launch.cleanup on this machine: recorded, live ranks of the run die;
                     a reused PID, another run's rank and another host's entry are left alone
    test_sigint_*    SIGINT to a real `bench run` once it makes progress: exit 130, an
                     `interrupted` record appended, no rank or launcher left, earlier runs intact
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.core import results
from bench.launch.cleanup import is_our_rank
from tests.conftest import FAST, REPO, reaped


def _fake_rank(run_dir: Path) -> subprocess.Popen:
    """A process whose argv is a rank's (`... bench.worker --run-dir RUN`), sleeping."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "-m", "bench.worker",
                             "--run-dir", str(run_dir)])


def _record_pid(run_dir: Path, rank: int, host: str, pid: int) -> None:
    """ranks/pid-<R> as a rank writes it, and a plan.json whose world holds it (cleanup reads each rank's by name)."""
    (run_dir / "ranks").mkdir(parents=True, exist_ok=True)
    (run_dir / "ranks" / f"pid-{rank}").write_text(f"{host} {pid}\n")
    plan = run_dir / "plan.json"
    world = json.loads(plan.read_text())["world_size"] if plan.exists() else 0
    plan.write_text(json.dumps({"world_size": max(world, rank + 1)}))


def _alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


def test_cleanup_kills_only_this_runs_recorded_ranks(tmp_path: Path) -> None:
    run, other = tmp_path / "run", tmp_path / "other-run"
    me = socket.gethostname()
    ours = _fake_rank(run)
    theirs = _fake_rank(other)                       # a rank of another run, recorded in ours by mistake
    reused = subprocess.Popen(["sleep", "600"])      # a PID reused by an unrelated process
    elsewhere = _fake_rank(run)                      # recorded as another host's: not ours to kill here
    try:
        _record_pid(run, 0, me, ours.pid)
        _record_pid(run, 1, me, theirs.pid)
        _record_pid(run, 2, me, reused.pid)
        _record_pid(run, 3, "some-other-node", elsewhere.pid)
        time.sleep(0.3)  # let the interpreters exec so /proc/PID/cmdline is theirs
        out = subprocess.run([sys.executable, "-m", "bench.launch.cleanup", str(run)], capture_output=True, text=True,
                             cwd=REPO, timeout=60)
        assert out.returncode == 0, out.stderr
        # Each PID's state just before the kill goes with it: a sleeping rank is S, a SIGSTOPped one T.
        assert json.loads(out.stdout) == {"host": me, "killed": [ours.pid], "error": None,
                                          "states": {str(ours.pid): "S (sleeping)"}}
        ours.wait(timeout=10)
        assert ours.returncode == -signal.SIGKILL
        assert _alive(theirs) and _alive(reused) and _alive(elsewhere)
    finally:
        for p in (ours, theirs, reused, elsewhere):
            p.kill()
            p.wait()


def test_cleanup_ends_a_stopped_rank(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rank = _fake_rank(run)
    try:
        _record_pid(run, 0, socket.gethostname(), rank.pid)
        time.sleep(0.3)
        rank.send_signal(signal.SIGSTOP)
        from bench.launch.cleanup import process_state, stop_ranks
        deadline = time.monotonic() + 10  # a signal is delivered when the kernel next schedules the process
        while process_state(rank.pid, str(run)) != "T (stopped)" and time.monotonic() < deadline:
            time.sleep(0.02)
        done = stop_ranks(str(run))
        assert done[0].killed == [rank.pid]
        assert done[0].states == {rank.pid: "T (stopped)"}  # what a hung run's record says of it
        assert rank.wait(timeout=10) == -signal.SIGKILL
    finally:
        rank.kill()
        rank.wait()


def _wait_for(pattern: str, proc: subprocess.Popen, limit_s: float) -> str:
    """The first path matching pattern; fails if bench exits first or limit_s passes."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = glob.glob(pattern)
        if found:
            return found[0]
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"bench exited {proc.returncode} before {pattern}: {err[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"no {pattern} after {limit_s:.0f} s")


def _processes_naming(text: str) -> list[str]:
    """Processes on this machine whose argv names `text` (the run dir): bench's own, none other."""
    hits = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                argv = f.read()
        except OSError:
            continue
        if text.encode() in argv:
            shown = argv.replace(b"\0", b" ")[:200].decode(errors="replace")
            hits.append(f"{cmdline.split('/')[2]}: {shown}")
    return hits


def seed_earlier_run(out: Path) -> tuple[Path, bytes]:
    """An earlier run's results.jsonl in the same --out; returns (path, its bytes)."""
    path = out / "20200101-000000-earlier" / "results.jsonl"
    path.parent.mkdir(parents=True)  # results.append makes no directory (a removed run dir stays removed)
    for i in range(2):
        results.append(str(path), results.make_record("run", "ok", run_id=f"earlier-{i}"))
    return path, path.read_bytes()


@pytest.mark.slow
def test_sigint_stops_every_rank_and_records_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    earlier, earlier_bytes = seed_earlier_run(out)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "bench", "--gpus", "2", "--dataset", "synthetic", *FAST,
                             "--steps", "5000", "--no-eval", "--timeout", "600", "--out", str(out), "--json"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped(proc):
        progress = _wait_for(str(out / "2*-*" / "progress.json"), proc, 900)
        run_dir = os.path.dirname(progress)
        pids = [int(open(p).read().split()[1]) for p in glob.glob(os.path.join(run_dir, "ranks", "pid-*"))]
        assert len(pids) == 2 and all(is_our_rank(p, run_dir) for p in pids)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    rec = json.loads(stdout)
    results.validate(rec)
    assert rec["status"] == "interrupted" and "SIGINT" in rec["error"]["reason"]
    # The record is appended, not only printed; the earlier run is untouched.
    assert results.read(os.path.join(run_dir, "results.jsonl")).records == [rec]
    assert earlier.read_bytes() == earlier_bytes
    # No rank (by its recorded PID) and no launcher process of this run is left.
    assert [p for p in pids if is_our_rank(p, run_dir)] == []
    assert _processes_naming(run_dir) == []


# bench SIGKILLed with local ranks: tests/multihost/test_faults.py (test_sigkill_of_bench_leaves_nothing_on_any_host[local]),
# which waits for it beside the pdsh and Open MPI cases.
