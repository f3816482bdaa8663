"""`bench validate --soak` on the namespace hosts: rounds recorded as they end, resumed after Ctrl-C, and a host
that slows down from a round on named with that round.

The slowdown is made from outside bench: the host's ranks, once their timed
steps begin, in a cgroup CPU quota for the resumed invocation.
"""

from __future__ import annotations

import glob
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.core import results
from tests.conftest import REPO, one_json
from tests.faults import cpu_quota_on

from .validate_runs import SLOTS

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def _recorded(out) -> list[dict]:
    files = glob.glob(str(out / "soak-*" / "results.jsonl"))
    return results.read(files[0]).records if files else []


def test_soak_resumes_after_sigint_and_names_the_round_a_host_slowed(cluster, tmp_path):
    out = tmp_path / "results"
    argv = [sys.executable, "-m", "bench", "validate", "--hostfile", str(cluster.write_hostfile(SLOTS)), "--level",
            "quick", "--checks", "throughput", "--soak", "60s", "--soak-keep-going", "--out", str(out),
            "--metrics-file", str(tmp_path / "soak.prom")]
    env = dict(cluster.env, PYTHONUNBUFFERED="1")
    first = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not _recorded(out):  # round 1 is on disk: Ctrl-C the second
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()[-3000:]
            time.sleep(0.2)
        time.sleep(3)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130, err[-3000:]
    assert [r["soak"]["round"] for r in _recorded(out)] == [1], "the interrupted round is not recorded"
    # The same command again resumes at round 2, with one host's ranks at 0.2 of a core from their first step.
    slow = cluster.hosts[1]
    with cpu_quota_on(cluster, slow, local_rank=None, quota_us=20000, after="start barrier"):
        proc = subprocess.run([*argv, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    rounds = _recorded(out)
    # A round takes 30-60 s here (load-dependent): 60 s is two rounds or more, the second slowed on.
    assert [r["soak"]["round"] for r in rounds] == list(range(1, rec["rounds"] + 1)) and rec["rounds"] >= 2
    assert rec["elapsed_s"] >= 60 and rec["elapsed_s"] == pytest.approx(sum(r["duration_s"] for r in rounds))
    trends = {(t["check"], t["node"]): t for t in rec["trends"]}
    for s in range(SLOTS):
        t = trends[("throughput", f"{slow}:{s}")]
        assert t["since"] == 2 and t["rounds"] == rec["rounds"], t
        assert t["worst_round"] >= 2 and t["points"][0][2] == "PASS"
    for host in (cluster.hosts[0], cluster.hosts[2]):
        for s in range(SLOTS):
            assert trends[("throughput", f"{host}:{s}")]["since"] is None
    # The metrics file is the last round's; the plot is written beside the rounds (looked at: see README).
    from tests.metrics_check import parse, values
    last = rounds[-1]
    got = parse((tmp_path / "soak.prom").read_text())
    assert values(got, "vitbench_gpu_images_per_second", host=slow, slot="0") == \
        [last["measured"]["gpu_images_per_s"][f"{slow}:0"]]
    assert rec["stopped"] == "the rounds' time reached the duration"
    assert (Path(rec["run_dir"]) / "soak.png").stat().st_size > 10000
