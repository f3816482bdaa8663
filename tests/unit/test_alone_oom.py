"""An independent run the kernel's OOM killer cut into: the rank the launch named, and every other silent rank that had
started, say the OOM killer; one that never started says so (bench.jobs.alone.record). Who started is what bench's
hub heard (a hello), not what the shared directory holds."""

from __future__ import annotations

import pytest

from bench.core.config import RunConfig
from bench.core.conversation.hub import RankState
from bench.jobs.alone import record
from bench.launch.execute import Outcome


@pytest.mark.process  # the record's provenance asks git for the revision
def test_silent_ranks_of_a_run_the_oom_killer_cut_say_so(tmp_path):
    (tmp_path / "ranks").mkdir()
    (tmp_path / "alone").mkdir()
    # Ranks 0-2 said hello to bench's hub; rank 3 never did.
    hello = {r: RankState(host="h", pid=100 + r, hello_at=1.0) for r in (0, 1, 2)}
    named = "rank 1 on h was killed by the kernel's OOM killer (memory cgroup /x counted 3 OOM kill(s)); no report"
    out = Outcome("oom", 1, 5.0, error={"where": "h", "reason": named, "rank": 1}, ranks=hello)
    plan = {"resources": {"h": [0, 1, 2, 3]}, "world_size": 4, "device": "cpu"}
    rec = record(RunConfig(), plan, "run", str(tmp_path), out, {}, {}, lambda *a: {})
    why = {r["rank"]: r["reason"] for r in rec["alone"]}
    assert why[1] == named
    assert all("OOM killer killed processes during this run" in why[r] and "likely one" in why[r] for r in (0, 2))
    assert why[3].startswith("never started"), why[3]
    assert rec["status"] == "failed"


@pytest.mark.process  # the record's provenance asks git for the revision
def test_a_rank_a_signal_ended_under_an_mpirun_that_exited_0_is_named_from_its_node_launchers_words(tmp_path):
    """Told not to abort on a non-zero exit, mpirun exits 0 whatever its ranks did (bench.launch.openmpi): the
    launch is "ok", and the rank that said hello and then left no report is named by the node launcher's line
    (--alone) for its PID; one whose line names another PID is not taken at it."""
    for d in ("ranks", "alone", "logs"):
        (tmp_path / d).mkdir()
    (tmp_path / "logs" / "launcher.log").write_text("[bench.launch.node] rank 1 pid 4242 ended by SIGKILL\n"
                                                    "[bench.launch.node] rank 2 pid 999 ended by SIGKILL\n")
    hello = {r: RankState(host="h", pid=4241 + r, hello_at=1.0) for r in (0, 1, 2)}  # rank 1: 4242
    out = Outcome("ok", 0, 5.0, ranks=hello)
    plan = {"resources": {"h": [0, 1, 2]}, "world_size": 3, "device": "cpu"}
    rec = record(RunConfig(), plan, "run", str(tmp_path), out, {}, {}, lambda *a: {})
    why = {r["rank"]: r["reason"] for r in rec["alone"]}
    assert why[1] == "no report: killed by SIGKILL (kill -9, or the kernel's OOM killer)"
    assert why[0] == why[2] == "no report"
