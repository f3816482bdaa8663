"""`bench tune` end to end on 2 local CPU ranks under a memory cgroup: the large micro batch is a recorded OOM.

Three trials (about a minute): zero1 (predicted to hold less) bisects [16, 4096]: 4096 is killed by the
OOM killer, 16 fits; zero0 is taken not to fit 4096 either (pruned, with the reason) and runs 16. A
`pkill` and a `killall` on PATH record any call: bench stops processes by PID, never by name.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bench.analysis.tune import validate_doc
from bench.core import results
from tests.conftest import REPO
from tests.multiproc.test_oom import _WRAPPER, memory_cgroup

pytestmark = pytest.mark.slow

LIMIT = 4 << 30     # two ranks of vit-micro at batch 16 and their launcher: ~2 GiB; batch 4096: ~9 GiB a rank


def test_tune_records_the_oom_validates_and_prints_the_command(tmp_path: Path) -> None:
    spy_bin, spy_log = tmp_path / "bin", tmp_path / "killed-by-name.log"
    spy_bin.mkdir()
    for name in ("pkill", "killall"):
        spy = spy_bin / name
        spy.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {spy_log}\n")
        spy.chmod(spy.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=f"{spy_bin}:{os.environ['PATH']}")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "bench", "tune", "--gpus", "2", "--dataset", "synthetic", "--model",
            "vit-micro-p4-32", "--synthetic-size", "8192", "--no-eval", "--strategies", "zero0,zero1",
            "--gpu-counts", "2", "--micro-batches", "16,4096", "--trial-steps", "4", "--budget", "3",
            "--timeout", "300", "--out", str(out)]
    with memory_cgroup(LIMIT) as cg:
        proc = subprocess.run([sys.executable, "-c", _WRAPPER, str(cg / "cgroup.procs"), *argv], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    doc = json.loads((out / "tune" / "tune.json").read_text())
    validate_doc(doc)
    assert doc["budget"]["spent_runs"] == 3 and len(doc["trials"]) == 3
    by_status = {}
    for t in doc["trials"]:
        by_status.setdefault(t["status"], []).append(t)
    (oom,) = by_status["oom"]
    assert oom["candidate"]["micro_batch"] == 4096 and oom["reason"]
    assert sorted(t["candidate"]["strategy"] for t in by_status["ok"]) == ["zero0", "zero1"]
    assert doc["ceilings"] == {"zero0": 16, "zero1": 16}
    # zero0 holds more per rank than zero1, which did not fit 4096: pruned with that reason, never run.
    (pruned,) = doc["pruned"]
    assert pruned["candidate"]["key"] == "zero0/gpus=2/mb=4096/accum=1" and "inferred out of memory" in pruned["reason"]
    # Every trial is a point record of the tune folder, schema-valid.
    recs = results.read(str(out / "tune" / "results.jsonl")).records
    for r in recs:
        results.validate(r)
    assert sorted(r["status"] for r in recs) == ["ok", "ok", "oom"] and {r["suite"] for r in recs} == {"tune"}
    # The table, the advice and the command on stdout; the command is the winner's.
    assert doc["command"] and doc["command"] in proc.stdout and doc["recommendation"][:40] in proc.stdout
    argv_run = doc["argv"]
    assert argv_run[:2] == ["bench", "run"] and argv_run[argv_run.index("--micro-batch") + 1] == "16"
    assert not spy_log.exists(), spy_log.read_text()

    # Again: everything is recorded, nothing runs, the same answer.
    again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "running" not in again.stderr
    doc2 = json.loads((out / "tune" / "tune.json").read_text())
    assert [t["id"] for t in doc2["trials"]] == [t["id"] for t in doc["trials"]] and doc2["command"] == doc["command"]
