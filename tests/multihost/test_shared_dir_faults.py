"""When things go wrong with `--out` on a real network filesystem (sharedfs.py's profiles "nfs" and "strict"):
bench Ctrl-C'd and SIGKILLed, a rank that hangs, a sweep stopped and resumed, and `bench report` of it.

The three faults of the strict profile start at once (3 hosts x 1 slot each, pdsh), as test_faults and
test_hangs run theirs on the local disk; each asks what those ask: exit 130 and an `interrupted` record;
nothing left on any host; the stopped rank named, with the collective the others waited in. The sweep runs
over the same hosts. Every client of a profile (the head, each host) keeps its own caches.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from bench.core import results
from tests.conftest import FAST, one_json, reaped

from .test_faults import _anywhere

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

START_LIMIT_S = 300
HANG_T = 15  # --timeout of the hung run (its watchdog; collective timeout 600 s: every rank still waits)


class _Run:
    def __init__(self, share, name: str, *extra: str):
        self.out = share.out(name)
        self.proc = share.popen("--hostfile", str(share.cluster.hostfile), "--launcher", "pdsh", "--dataset",
                                "synthetic", *FAST, "--steps", "100000", "--no-eval", *extra, "--out", self.out,
                                "--json")
        self.run_dir, self.stdout, self.stderr = "", "", ""

    def training(self) -> dict[int, tuple[str, int]] | None:
        """{rank: (host, pid)} once bench wrote progress.json (read on the server's disk), else None."""
        found = glob.glob(os.path.join(self.out, "2*-*", "progress.json"))
        if not found:
            assert self.proc.poll() is None, self.proc.communicate()[1][-3000:]
            return None
        self.run_dir = os.path.dirname(found[0])
        pids = {}
        for r in range(3):
            host, pid = Path(self.run_dir, "ranks", f"pid-{r}").read_text().split()
            pids[r] = (host, int(pid))
        return pids

    def finish(self, limit_s: float) -> None:
        self.stdout, self.stderr = self.proc.communicate(timeout=limit_s)


def _nothing_left(run_dir: str, limit_s: float) -> list[str]:
    deadline = time.monotonic() + limit_s
    while (left := _anywhere(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


# The strict profile alone (the suite's budget): its attributes and listings are cached 30 s against nfs's 3 s and
# none; nfs's longer negative lookups (60 s) are asked by test_shared_dir's validate on listings cached an hour.
PROFILES = ("strict",)


@pytest.fixture(scope="module")
def faulted(shared_cluster):
    """Per profile: one run Ctrl-C'd, one SIGKILLed, one with rank 1 SIGSTOPped, all faulted once they train.

    The runs of every profile in PROFILES start together (a hung run waits out its watchdog and bench stops it,
    about 25 s, while the others' ranks start, not after); every run is faulted as it trains, so the hung runs'
    watchdogs fire, and bench asks their ranks where they are, once the starts are over."""
    shares = {profile: shared_cluster(profile) for profile in PROFILES}
    runs = {(profile, name): _Run(shares[profile], name, *extra) for profile in PROFILES for name, extra in (
        ("int", ()), ("kill", ()), ("hang", ("--timeout", str(HANG_T), "--collective-timeout", "600")))}
    pids: dict[tuple[str, str], dict] = {}
    deadline = time.monotonic() + START_LIMIT_S
    try:
        while len(pids) < len(runs):
            assert time.monotonic() < deadline, f"not training after {START_LIMIT_S} s: {sorted(pids)}"
            for key, run in runs.items():
                if key not in pids and (p := run.training()) is not None:
                    pids[key] = p
                    if key[1] == "int":
                        run.proc.send_signal(signal.SIGINT)
                    elif key[1] == "kill":
                        run.proc.kill()
                    else:
                        os.kill(p[1][1], signal.SIGSTOP)
            time.sleep(0.2)
        for run in runs.values():
            run.finish(HANG_T + 600)
    finally:
        for run in runs.values():
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.communicate()
        for key in [k for k in pids if k[1] == "hang"]:  # never leave a stopped process, were bench to fail to stop it
            for sig in (signal.SIGKILL, signal.SIGCONT):
                with_pid = pids[key][1][1]
                if os.path.exists(f"/proc/{with_pid}") and runs[key].run_dir.encode() in \
                        Path(f"/proc/{with_pid}/cmdline").read_bytes():
                    os.kill(with_pid, sig)
    return {profile: (shares[profile], {name: runs[(profile, name)] for name in ("int", "kill", "hang")},
                      {name: _nothing_left(runs[(profile, name)].run_dir, 60) for name in ("int", "kill", "hang")})
            for profile in PROFILES}


@pytest.mark.parametrize("profile", PROFILES)
def test_ctrl_c_and_sigkill_of_bench_leave_nothing_on_any_host(faulted, profile):
    _, runs, left = faulted[profile]
    assert left["int"] == [] and left["kill"] == [], left
    r = runs["int"]
    assert r.proc.returncode == 130, r.stderr[-3000:]
    rec = json.loads(r.stdout)
    assert rec["status"] == "interrupted" and "interrupted (SIGINT)" in rec["error"]["reason"], rec["error"]
    assert results.read(os.path.join(r.run_dir, "results.jsonl")).records[-1]["status"] == "interrupted"
    assert runs["kill"].proc.returncode == -signal.SIGKILL
    logs = "".join(Path(p).read_text() for p in glob.glob(os.path.join(runs["kill"].run_dir, "logs", "rank*.log")))
    assert logs.count("closed the connection") == 3, "every rank saw bench go at once, not after a wait"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_stopped_rank_is_named_with_the_collective_the_others_waited_in(faulted, profile):
    share, runs, left = faulted[profile]
    r = runs["hang"]
    assert left["hang"] == [], left
    assert r.proc.returncode == 1, r.stderr[-3000:]
    rec = json.loads(r.stdout)
    results.validate(rec)
    err = rec["error"]
    host = share.cluster.hostnames[1]
    assert err["rank"] == 1 and err["host"] == host, err
    assert re.fullmatch(rf"hung at step \d+: rank 1 on {host} did not answer: its process was stopped \(state T: "
                        r"SIGSTOP, or a debugger\); 2 ranks waited in \w+ #\d+", err["reason"]), err["reason"]
    at = {e["rank"]: e for e in err["ranks_at"]}
    assert at[1]["at"] == "no answer" and at[1]["process_state"].startswith("T"), at[1]
    assert {at[r]["source"] for r in (0, 2)} == {"stack"}, at  # their answers came back over their connections
    assert err["hang"]["stack_request"]["answered"] == [0, 2], err["hang"]


@pytest.mark.parametrize("profile", PROFILES)
def test_a_sweep_stopped_and_resumed_then_reported(shared_cluster, profile):
    share = shared_cluster(profile)
    c = share.cluster
    out = share.out("sweep")
    argv = ("sweep", "batch", "--hostfile", str(c.hostfile), "--launcher", "pdsh", "--dataset", "synthetic", *FAST,
            "--steps", "6", "--micro-batches", "8,16", "--gpu-counts", "3", "--out", out, "--json")
    ids = ["batch/mb=8/gpus=3", "batch/mb=16/gpus=3"]
    jsonl = os.path.join(out, "batch", "results.jsonl")
    proc = share.popen(*argv, env=c.env)
    with reaped(proc):
        deadline = time.monotonic() + START_LIMIT_S
        while not (os.path.exists(jsonl) and results.read(jsonl).records):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # the first point recorded, the second running
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    kept = [r["point_id"] for r in results.read(jsonl).records if r["status"] == "ok"]
    assert kept == ids[:1], kept
    again = share.bench(*argv, env=c.env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = one_json(again.stdout)
    assert summary["skipped"] == kept and summary["launched"] == ids[1:], summary
    recs = [r for r in results.read(jsonl).records if r["status"] == "ok"]
    assert sorted(r["point_id"] for r in recs) == sorted(ids)
    assert {r["figures"]["world_size"] for r in recs} == {3}
    report = share.bench("report", os.path.join(out, "batch"), "--json", env=c.env, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    doc = one_json(report.stdout)
    (group,) = [g for g in doc["groups"] if g["sweep"] == "batch"]
    assert {r["id"] for r in group["rows"] if r["status"] == "ok"} == set(ids), group["rows"]
