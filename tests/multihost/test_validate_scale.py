"""bench validate where some node always fails: six namespace hosts, four of them broken four ways, and the two
others judged by default, within the plan's budget.

  two hosts    sshd stopped: not reached (preflight ERROR, unknown)
  one host     its Python exits as it imports bench's rank code (its own sitecustomize): its GPU never starts
  one host     its rank SIGSTOPped while it trains in the per-GPU run: silent while the others finish, named,
               and the launch ends without waiting out the level's timeout (bench.launch.left_behind)

The 61-host run of the same is benchmarks/validate_scale_hosts.py (on demand: minutes on two cores).
"""

from __future__ import annotations

import contextlib
import time

import pytest

from bench.core import results
from tests.faults import exit_at_import, on_one_host, sigstop_on

from .validate_runs import row, run_validate

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def test_with_four_of_six_nodes_broken_the_other_two_are_judged_and_the_verdict_comes_in_time(cluster_factory,
                                                                                             tmp_path):
    c = cluster_factory(6)
    gone, broken, stopped_host, good = c.hosts[0:2], c.hosts[2], c.hosts[3], c.hosts[4:]
    with contextlib.ExitStack() as stack:
        for h in gone:
            c.stop_sshd(h)
            stack.callback(c.start_sshd, h)
        site = stack.enter_context(on_one_host(c, broken, {"sitecustomize.py": exit_at_import("bench.worker")}))
        stopped = stack.enter_context(sigstop_on(c, stopped_host, after="start barrier"))
        t0 = time.monotonic()
        v = run_validate(c, tmp_path, "--checks", "throughput", env=dict(c.env, PYTHONPATH=site), slots=1)
        took = time.monotonic() - t0
    assert v.rec is not None, v.proc.stderr[-3000:]
    rec = v.rec
    results.validate(rec)
    assert stopped, "no rank was caught to stop"
    assert v.proc.returncode in (1, 3), v.proc.stderr[-3000:]
    # The verdict came well inside the level's timeout: the stopped rank did not hold the launch for it.
    per_gpu = next(s for s in rec["stages"] if s["stage"] == "throughput")
    assert per_gpu["duration_s"] < 200, per_gpu
    for h in gone:
        assert row(rec, "preflight", h)["status"] == "ERROR" and "unreachable" in row(rec, "preflight", h)["reason"]
        assert rec["nodes"][h]["verdict"] == "unknown"
    r = row(rec, "throughput", f"{broken}:0")
    assert r["status"] == "ERROR" and "never started" in r["reason"], r
    r = row(rec, "throughput", f"{stopped_host}:0")
    assert r["status"] in ("ERROR", "FAIL") and "SIGSTOP" in r["reason"], r
    assert rec["nodes"][broken]["verdict"] == "unknown"
    assert rec["nodes"][stopped_host]["verdict"] in ("unknown", "drain")
    for h in good:
        assert row(rec, "throughput", f"{h}:0")["status"] in ("PASS", "WARN"), row(rec, "throughput", f"{h}:0")
        assert rec["nodes"][h]["verdict"] in ("healthy", "degraded"), rec["nodes"][h]
    print(f"6 hosts, 4 broken: verdict in {took:.0f} s (per-GPU stage {per_gpu['duration_s']:.0f} s)")
