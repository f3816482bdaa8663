"""`bench validate --soak` on the namespace hosts: rounds recorded as they end, resumed after Ctrl-C, and a host
that slows down from a round on named with that round.

The slowdown is made from outside bench: tc on the host's veth for the
resumed invocation. The rounds are the inter-node check only, one slot a
host (three comm ranks: seconds a round); the per-GPU and numerics rounds
are the same loop (bench.validate.soak.ROUND).
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
from tests.conftest import REPO, one_json, reaped

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def _recorded(out) -> list[dict]:
    files = glob.glob(str(out / "soak-*" / "results.jsonl"))
    return results.read(files[0]).records if files else []


def _interrupt_after(argv, env, out, rounds: int) -> None:
    """Run the soak until `rounds` rounds are on disk, then Ctrl-C it: exit 130, nothing of the next round kept."""
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped(proc):
        deadline = time.monotonic() + 600
        while len(_recorded(out)) < rounds:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert [r["soak"]["round"] for r in _recorded(out)] == list(range(1, rounds + 1)), "the interrupted round"


def test_soak_resumes_after_sigint_and_names_the_round_a_host_slowed(cluster, tmp_path):
    out = tmp_path / "results"
    base = [sys.executable, "-m", "bench", "validate", "--hostfile", str(cluster.write_hostfile(1)), "--level",
            "quick", "--checks", "health,inter-node", "--soak-keep-going", "--out", str(out), "--metrics-file",
            str(tmp_path / "soak.prom")]
    env = dict(cluster.env, PYTHONUNBUFFERED="1")
    _interrupt_after([*base, "--soak", "10m"], env, out, rounds=1)
    # The same command again resumes at round 2, one host's link at 100 Mbit/s from then on.
    slow = cluster.hosts[1]
    r = cluster.exec_in(slow, ["tc", "qdisc", "add", "dev", "vb0", "root", "tbf", "rate", "100mbit", "burst",
                               "64kbit", "latency", "50ms"])
    assert r.returncode == 0, r.stderr
    try:
        _interrupt_after([*base, "--soak", "10m"], env, out, rounds=2)
    finally:
        cluster.exec_in(slow, ["tc", "qdisc", "del", "dev", "vb0", "root"])
    # Asked for less than was already run: no new round, the report of the two.
    proc = subprocess.run([*base, "--soak", "1s", "--json"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    rounds = _recorded(out)
    assert rec["rounds"] == 2 and rec["elapsed_s"] == pytest.approx(sum(r["duration_s"] for r in rounds))
    trends = {(t["check"], t["node"]): t for t in rec["trends"]}
    t = trends[("inter-node", slow)]
    assert t["since"] == 2 and t["points"][0][2] == "PASS" and t["worst_round"] == 2 and t["failed_rounds"] == [2], t
    for host in (cluster.hosts[0], cluster.hosts[2]):
        assert trends[("inter-node", host)]["since"] is None, trends[("inter-node", host)]
    assert trends[("inter-node", f"{cluster.hosts[2]}+{cluster.hosts[0]}")]["since"] is None
    assert rec["result"] == "FAIL" and rec["failed_rounds"] == [2] and proc.returncode == 1
    # Every round ends with each node's health read again (the Xids its stress raised): a row per host, PASS;
    # in round 2 the slowed host had FAILed its link, so it is left out (it drains anyway).
    for r in rounds:
        assert r["stages"][-1]["stage"] == "health", r["stages"]
        got = {c["node"]: (c["status"], c["reason"]) for c in r["checks"] if c["check"] == "health"}
        for host in cluster.hosts:
            if r["soak"]["round"] == 2 and host == slow:
                assert got[host][0] == "SKIP" and got[host][1].startswith("left out after a FAIL in inter-node")
            else:
                assert got[host][0] == "PASS", (host, got[host])
    # The metrics file is the last round's; the plot is written beside the rounds.
    from tests.metrics_check import parse, values
    got = parse((tmp_path / "soak.prom").read_text())
    assert values(got, "vitbench_node_busbw_bytes_per_second", host=slow) == \
        [rounds[-1]["measured"]["node_busbw"][slow]]
    assert rec["stopped"] == "the rounds' time reached the duration"
    assert (Path(rec["run_dir"]) / "soak.png").stat().st_size > 10000
