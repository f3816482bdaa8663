"""Storage faults under real runs: a small tmpfs as --out (filled mid-run), a read-only bind mount, a removed run dir.

Each test mounts its own file system under its tmp_path (root only; the
suite runs as root) and unmounts it afterwards. A run is started as a
user starts it (`python -m bench`), and the fault is made from here when a
file of the run appears: the tmpfs filled to the last block by a file of
this test, or the run directory removed. What must hold every time: exit 1
with one line on stderr naming the path and the error, never a traceback;
the record that could not be written whole on stdout; no rank temporary
left; results.jsonl without a torn line; a sweep keeps its finished points.

A fault "mid run" goes in at the run's first progress.json (bench writes it
within half a second of rank 0's first step), and the test checks there that
the run is short of its end (the step bench heard of below the total, no
summary.json yet). MID_STEPS and MID_ITERS leave the ranks about ten times
that half second to go on with after the fault (0.1 s a step, ~12 ms a comm
iteration on two quiet cores); more only adds steps that run on a full disk.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from bench.core import results
from tests.conftest import REPO, assert_bad_input, bench, one_json

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")]

RUN = ("--gpus", "2", "--dataset", "synthetic", "--model", "vit-micro-p4-32", "--synthetic-size", "512",
       "--micro-batch", "16", "--timing-warmup", "2", "--no-eval")


@contextlib.contextmanager
def mounted(path, *mount_args: str):
    os.makedirs(path)
    subprocess.run(["mount", *mount_args, str(path)], check=True)
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", str(path)], check=True)
        os.rmdir(path)


def tmpfs(path, size_k: int):
    return mounted(path, "-t", "tmpfs", "-o", f"size={size_k}k", "vitbench-test")


def fill(mnt: str) -> None:
    """Write zeros into mnt until its file system has no block left."""
    with open(os.path.join(mnt, "filler"), "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
    with open(os.path.join(mnt, "filler2"), "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0")


def run_until(args: list[str], when, then, timeout: float = 300):
    """Start `python -m bench ARGS`; call then() once when() is true; the finished process's (rc, stdout, stderr)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done, t0 = False, time.monotonic()
    try:
        while p.poll() is None and not done and time.monotonic() - t0 < timeout:
            if when():
                then()
                done = True
            time.sleep(0.01)
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert done, ("the fault was never made: the run ended first", p.returncode, err[-2000:])
    return p.returncode, out, err


# The run's length after a fault made at its first progress (module docstring). It came at step 1 of 60 (comm: 0 of
# 13 sizes done) in two runs here; 400 steps and 200 iterations cost the suite some 80 s more for nothing.
MID_STEPS = "60"
MID_ITERS = "50"


def while_running(progress_glob: str, fault):
    """then() for run_until: check the run has not reached its end (bench's progress short of the total, rank 0's
    summary.json not written), then make the fault: a fault after the ranks' last write is another test's."""

    def then() -> None:
        (path,) = glob.glob(progress_glob)
        with open(path) as f:
            doc = json.load(f)
        assert doc["step"] < doc["total"], ("the fault came after the last step", doc)
        assert not os.path.exists(os.path.join(os.path.dirname(path), "summary.json")), "the run had ended"
        fault()
        print(f"fault at step {doc['step']} of {doc['total']}")

    return then


def one_line(err: str, progress: str | None = None) -> str:
    """The one line bench printed on stderr, beside a sweep's own progress lines (starting `progress`)."""
    lines = [line for line in err.splitlines() if line.strip() and not (progress and line.startswith(progress))]
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def no_temporaries(root: str) -> None:
    assert glob.glob(os.path.join(root, "**", "*.tmp"), recursive=True) == []


def whole_lines(path: str) -> int:
    """The number of records in a results.jsonl; every line whole (a missing file holds none)."""
    if not os.path.exists(path):
        return 0
    data = open(path, "rb").read()
    assert data == b"" or data.endswith(b"\n"), data[-200:]
    return len([json.loads(line) for line in data.splitlines()])


def run_dirs(mnt: str) -> list[str]:
    return [d for d in glob.glob(os.path.join(mnt, "*")) if os.path.isdir(d)]


def test_too_small_is_refused_before_anything_runs(tmp_path):
    with tmpfs(tmp_path / "tiny", 40) as mnt:
        proc = bench(*RUN, "--steps", "6", "--out", mnt)
        assert_bad_input(proc, f"--out: {mnt} has 40 KiB free; a 2-rank run writes at least 64 KiB")
        assert os.listdir(mnt) == []


def test_read_only_out_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with mounted(tmp_path / "ro", "--bind", str(src)) as ro:
        subprocess.run(["mount", "-o", "remount,bind,ro", ro], check=True)
        assert_bad_input(bench(*RUN, "--steps", "6", "--out", ro), f"--out: {ro} is on a read-only file system")
        assert_bad_input(bench("sweep", "ddp", *RUN, "--steps", "6", "--out", ro),
                         "--out: cannot create")
    assert os.listdir(src) == []


def filled_at(mnt: str, args: list[str], trigger: str) -> tuple[str, str, dict]:
    """Run bench on mnt, fill mnt when <run>/trigger appears (at progress.json: while the run is short of its
    end); what every such run must show, then (run dir, the stderr line, the record printed on stdout)."""
    where = os.path.join(mnt, "*", trigger)
    then = while_running(where, lambda: fill(mnt)) if trigger == "progress.json" else lambda: fill(mnt)
    rc, out, err = run_until([*args, "--out", mnt, "--json"], lambda: glob.glob(where), then)
    line = one_line(err)
    (run_dir,) = run_dirs(mnt)
    assert rc == 1, (out[-2000:], err)
    assert line.startswith(f"bench: failed: cannot write {run_dir}/results.jsonl (No space left on device); the "
                           "record it would have held is on stdout: nothing measured is lost"), line
    rec = one_json(out)
    results.validate(rec)
    assert whole_lines(os.path.join(run_dir, "results.jsonl")) == 0
    no_temporaries(mnt)
    return run_dir, line, rec


def test_disk_full_after_training_prints_the_record(tmp_path):
    """The ranks finished and rank 0 wrote its figures; then the disk filled: the record is on stdout."""
    with tmpfs(tmp_path / "out", 2048) as mnt:
        run_dir, _, rec = filled_at(mnt, [*RUN, "--steps", "6"], "summary.json")
        assert rec["status"] == "ok" and rec["figures"]["images_per_s"] > 0 and rec["run_dir"] == run_dir


def test_disk_full_mid_training(tmp_path):
    with tmpfs(tmp_path / "out", 2048) as mnt:
        run_dir, _, rec = filled_at(mnt, [*RUN, "--steps", MID_STEPS], "progress.json")
        assert rec["status"] == "failed"
        assert rec["error"]["storage"].startswith(f"the file system of {run_dir} is full"), rec["error"]
        assert rec["error"]["reason"].startswith(rec["error"]["storage"]), rec["error"]


def test_run_directory_removed_mid_run(tmp_path):
    out_root = tmp_path / "results"

    def remove():
        (progress,) = glob.glob(str(out_root / "*" / "progress.json"))
        shutil.rmtree(os.path.dirname(progress))

    rc, out, err = run_until([*RUN, "--steps", MID_STEPS, "--out", str(out_root), "--json"],
                             lambda: glob.glob(str(out_root / "*" / "progress.json")),
                             while_running(str(out_root / "*" / "progress.json"), remove))
    line = one_line(err)
    assert rc == 1, (out[-2000:], err)
    assert line.startswith("bench: failed: cannot write ") and "(No such file or directory)" in line, line
    rec = one_json(out)
    results.validate(rec)
    assert rec["status"] == "failed"
    assert rec["error"]["storage"] == f"the run directory {rec['run_dir']} was removed during the run"
    assert os.listdir(out_root) == []  # not made again by a late write


def test_sweep_stops_at_the_point_and_keeps_the_finished_ones(tmp_path):
    with tmpfs(tmp_path / "out", 4096) as mnt:
        sweep_dir = os.path.join(mnt, "ddp")
        points = ["ddp/engine=deepspeed/gpus=2", "ddp/engine=ddp/gpus=2", "ddp/engine=fsdp2/gpus=2"]  # its order
        # Filled once point 1 finished and point 2 began (its progress.json is the second one). Where the full disk
        # stops the sweep is the machine's timing: point 2 of 6 steps, whose first progress bench hears over the
        # network, finished and was kept before the fill in one CI run, and point 3 could not start. Either way the
        # points finished before it are kept whole and the one it stopped at is named.
        rc, out, err = run_until(["sweep", "ddp", *RUN, "--steps", "6", "--out", mnt, "--json"],
                                 lambda: len(glob.glob(os.path.join(sweep_dir, "runs", "*", "progress.json"))) >= 2,
                                 lambda: fill(mnt))
        line = one_line(err, progress="sweep ddp: ")
        assert rc == 1, (out[-2000:], err)
        kept = results.read(os.path.join(sweep_dir, "results.jsonl")).records
        n = len(kept)
        assert 1 <= n < len(points) and [r["point_id"] for r in kept] == points[:n], kept
        assert all(r["status"] == "ok" for r in kept) and whole_lines(os.path.join(sweep_dir, "results.jsonl")) == n
        assert line.endswith(f"the sweep stopped at point {points[n]}; {n} finished point(s) are kept in "
                             f"{sweep_dir}/results.jsonl"), line
        # The stopped point's record, as the sweep would have kept it, where it measured anything (a point that
        # could not write its config.json never started: nothing of it to print).
        assert ("the record it would have held is on stdout" in line) == bool(out.strip()), (line, out[-500:])
        if out.strip():
            rec = one_json(out)
            results.validate(rec)
            assert rec["kind"] == "point" and rec["point_id"] == points[n]
        no_temporaries(mnt)


def test_comm_disk_full_mid_run(tmp_path):
    with tmpfs(tmp_path / "out", 2048) as mnt:
        _, _, rec = filled_at(mnt, ["comm", "--gpus", "2", "--sizes", "1K:4M", "--iters", MID_ITERS], "progress.json")
        assert rec["kind"] == "comm" and rec["status"] == "failed" and "storage" in rec["error"]
