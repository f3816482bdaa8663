"""Faults during a real 3-host `bench run --launcher pdsh` (netns hosts, see netns.py).

Each test starts one long run (rank r on node<r+1>), waits until the ranks
train (progress.json), breaks something, and then checks that
(hangs: a SIGSTOPped rank, blocked data loading, a host's traffic dropped, are
test_hangs.py's, which runs them together)

- the whole job ends within BOUND_S of the fault (below),
- no rank bench started is left on any host: the PIDs the ranks recorded
  (ranks/pid-<R> = "hostname pid") are gone, and no process inside any
  host's network namespace still runs this run's worker or launcher,
- the record says `failed` (or `interrupted`) and names the host and why,
- an earlier run's results.jsonl in the same --out is byte-for-byte intact.

The bound: --timeout T (30 s here) sets both the ranks' collective timeout
(plan.json collective_timeout_s = max(30, T)) and bench's watchdog (no new
progress.json for T s stops the launcher's process group). After either,
bench stops what is left by PID (bench.launch.cleanup over ssh, at most 20 s per
host in parallel), so a job ends within T + 10 s (stop_group's grace) + 20 s
(cleanup) + one step. BOUND_S = 2 T + 60 s leaves room for a loaded machine.
A host whose link is cut cannot be reached to be stopped: its rank ends by
its own collective timeout, and the test waits for that too.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.core import results
from tests.conftest import FAST, REPO, bench

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

TIMEOUT_S = 30
BOUND_S = 2 * TIMEOUT_S + 60
START_LIMIT_S = 900  # first progress: imports and a JIT build on a busy machine
SECRET = "fake-token-in-env-5e6f"
TIMINGS: dict[str, float] = {}


def _seed_earlier(out: Path) -> tuple[Path, bytes]:
    path = out / "20200101-000000-earlier" / "results.jsonl"
    path.parent.mkdir(parents=True)  # results.append makes no directory (a removed run dir stays removed)
    for i in range(2):
        results.append(str(path), results.make_record("run", "ok", run_id=f"earlier-{i}"))
    return path, path.read_bytes()


class Run:
    """A long `bench run` across the cluster, started in the background."""

    def __init__(self, cluster, out: Path, launcher: str = "pdsh", timeout: float = TIMEOUT_S,
                 extra: tuple[str, ...] = (), env: dict[str, str] | None = None):
        """cluster None: this machine's 2 local ranks (no hostfile, DeepSpeed's local launch)."""
        env = dict(os.environ if cluster is None else cluster.env, PYTHONUNBUFFERED="1",
                   VITBENCH_FAKE_TOKEN=SECRET, **(env or {}))
        where = ["--gpus", "2"] if cluster is None else ["--hostfile", str(cluster.hostfile), "--launcher", launcher]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench", *where,
             "--dataset", "synthetic", *FAST, "--steps", "100000", "--no-eval", "--timeout", str(timeout),
             *extra, "--out", str(out), "--json"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = out
        self.cluster = cluster
        self.earlier: tuple = ()
        self.world = 2 if cluster is None else len(cluster.hosts)
        self.run_dir = ""
        self.stdout = self.stderr = ""

    def poll_training(self) -> dict[int, tuple[str, int]] | None:
        """{rank: (hostname, pid)} of every rank once rank 0 reports progress, else None (not yet)."""
        found = glob.glob(str(self.out / "2*-*" / "progress.json"))
        if not found:
            return None
        self.run_dir = os.path.dirname(found[0])
        pids = _recorded(self.run_dir)
        assert sorted(pids) == list(range(self.world)), pids
        return pids

    def training(self, deadline: float) -> dict[int, tuple[str, int]] | None:
        """poll_training(), failing the test where bench exited before training or the deadline passed."""
        pids = self.poll_training()
        if pids is None and self.proc.poll() is not None:
            self.finish(0)
            pytest.fail(f"bench exited {self.proc.returncode} before training: {self.stderr[-3000:]}")
        if pids is None and time.monotonic() > deadline:
            self.kill()
            pytest.fail(f"no progress after {START_LIMIT_S} s")
        return pids

    def wait_training(self) -> dict[int, tuple[str, int]]:
        """Block until rank 0 reports progress; {rank: (hostname, pid)} of every rank (one per host)."""
        deadline = time.monotonic() + START_LIMIT_S
        while (pids := self.training(deadline)) is None:
            time.sleep(0.5)
        return pids

    def finish(self, bound: float) -> float:
        """Wait for bench to exit within bound seconds; returns the seconds it took."""
        t0 = time.monotonic()
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=bound or None)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"bench still running {bound:.0f} s after the fault")
        return time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # bench's own stop path, so the test leaves nothing
            try:
                self.proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()

    def stop(self) -> None:
        """kill() for a run whose output another thread drains (communicate() here would race it for the pipes)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def record(self) -> dict:
        rec = json.loads(self.stdout)
        results.validate(rec)
        assert results.read(os.path.join(self.run_dir, "results.jsonl")).records == [rec]
        return rec


def _recorded(run_dir: str) -> dict[int, tuple[str, int]]:
    out = {}
    for path in glob.glob(os.path.join(run_dir, "ranks", "pid-*")):
        host, pid = Path(path).read_text().split()
        out[int(os.path.basename(path)[4:])] = (host, int(pid))
    return out


def _ours_in_namespace(cluster, host: str, run_dir: str) -> list[str]:
    """Processes inside host's network namespace whose argv names this run (ranks, their node launcher)."""
    pids = subprocess.run(["ip", "netns", "pids", cluster.ns_of(host)], capture_output=True, text=True).stdout.split()
    left = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if os.fsencode(run_dir) in argv:
            shown = argv.replace(b"\0", b" ")[:160].decode(errors="replace")
            left.append(f"{host} pid {pid}: {shown}")
    return left


def _left_behind(cluster, run_dir: str, pids: dict[int, tuple[str, int]]) -> list[str]:
    from bench.launch.cleanup import is_our_rank

    left = [f"rank {r} ({h}) pid {p}" for r, (h, p) in pids.items() if is_our_rank(p, run_dir)]
    for host in cluster.hosts:
        left += _ours_in_namespace(cluster, host, run_dir)
    return left


def _wait_nothing_left(cluster, run_dir: str, pids, limit_s: float) -> list[str]:
    deadline = time.monotonic() + limit_s
    while True:
        left = _left_behind(cluster, run_dir, pids)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1.0)


def _common_checks(run: Run, earlier: Path, earlier_bytes: bytes) -> None:
    assert "Traceback" not in run.stderr
    assert earlier.read_bytes() == earlier_bytes
    for p in Path(run.run_dir).rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


def _host_of_rank(cluster, rank: int) -> str:
    return cluster.hosts[rank]


def test_rank_killed_mid_run(cluster, tmp_path):
    out = tmp_path / "out"
    earlier, earlier_bytes = _seed_earlier(out)
    run = Run(cluster, out)
    pids = run.wait_training()
    victim_host, victim_pid = pids[1]
    os.kill(victim_pid, signal.SIGKILL)
    TIMINGS["rank SIGKILLed"] = run.finish(BOUND_S)
    assert run.proc.returncode == 1, run.stderr[-3000:]
    rec = run.record()
    assert rec["status"] == "failed"
    err = rec["error"]
    assert err["rank"] == 1 and err["host"] == victim_host == cluster.hostnames[1], err
    # The signal is named: its node's launcher (bench.launch.node, through pdsh) said so in launcher.log.
    assert err["signal"] == "SIGKILL" and "without a report: killed by SIGKILL" in err["reason"], err
    assert f"bench: failed: rank 1 on {victim_host}: died without a report: killed by SIGKILL" in run.stderr
    assert _wait_nothing_left(cluster, run.run_dir, pids, 30) == []
    _common_checks(run, earlier, earlier_bytes)


def test_sigint_stops_remote_ranks(cluster, tmp_path):
    out = tmp_path / "out"
    earlier, earlier_bytes = _seed_earlier(out)
    run = Run(cluster, out)
    pids = run.wait_training()
    run.proc.send_signal(signal.SIGINT)
    TIMINGS["Ctrl-C (SIGINT to bench)"] = run.finish(BOUND_S)
    assert run.proc.returncode == 130, run.stderr[-3000:]
    rec = run.record()
    assert rec["status"] == "interrupted" and "SIGINT" in rec["error"]["reason"]
    assert _wait_nothing_left(cluster, run.run_dir, pids, 10) == []
    _common_checks(run, earlier, earlier_bytes)


def test_host_without_sshd_is_named_by_preflight(cluster, tmp_path):
    out = tmp_path / "out"
    earlier, earlier_bytes = _seed_earlier(out)
    down = cluster.hosts[2]
    cluster.stop_sshd(down)
    try:
        t0 = time.monotonic()
        proc = bench("--hostfile", str(cluster.hostfile), "--launcher", "pdsh", "--dataset", "synthetic", *FAST,
                     "--steps", "20", "--out", str(out), "--json", env=cluster.env, timeout=BOUND_S)
        TIMINGS["host without sshd (preflight)"] = time.monotonic() - t0
    finally:
        cluster.start_sshd(down)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"preflight: {down}: unreachable" in proc.stderr and "Traceback" not in proc.stderr
    # Nothing launched: no rank anywhere, and only the earlier run under --out.
    assert not glob.glob(str(out / "*" / "ranks" / "*"))
    for host in cluster.hosts:
        assert _ours_in_namespace(cluster, host, str(out)) == []
    assert earlier.read_bytes() == earlier_bytes


def _anywhere(run_dir: str) -> list[str]:
    """Every process on this machine (all the hosts share its PID namespace) whose argv names run_dir."""
    hits = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = Path(cmdline).read_bytes()
        except OSError:
            continue
        if os.fsencode(run_dir) in argv:
            hits.append(argv.replace(b"\0", b" ")[:160].decode(errors="replace"))
    return hits


def _daemons() -> list[str]:
    names = []
    for comm in glob.glob("/proc/[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if Path(comm).read_text().strip() in ("orted", "prted"):
                names.append(comm)
    return names


def _count_per_host(cluster, run_dir: str) -> dict[str, int]:
    return {h: len(_ours_in_namespace(cluster, h, run_dir)) for h in cluster.hosts}


@dataclass
class Waited:
    """One of the runs `waits` starts: its Run, the PIDs its ranks recorded, and what the wait found."""

    run: Run
    pids: dict[int, tuple[str, int]]
    before: dict[str, int] = field(default_factory=dict)
    everywhere: int = 0
    left: list[str] = field(default_factory=list)
    took_s: float = 0.0
    failure: str | None = None


@pytest.fixture(scope="module")
def waits(stalls) -> dict[str, Waited]:
    return stalls.part("waits")


def wait_out(cluster, other, tmp: Path, faulted: threading.Event) -> dict[str, Waited]:
    """The faults whose test is mostly waiting, started together so that the waits overlap (the suite's budget):
    bench SIGKILLed under pdsh and under Open MPI (the ranks see their connection to bench close), and a host's link cut
    mid-run (collective timeout and watchdog, then the isolated rank's own timeout), on 3 hosts of its own (a cut
    link must not break the other runs). `faulted` is set once every fault is in: from there on these runs only
    wait, and the hang runs start beside them (conftest.stalls)."""
    started: dict[str, Run] = {}
    try:
        cut_earlier = _seed_earlier(tmp / "cut")
        started["cut"] = Run(other, tmp / "cut")
        for launcher in ("pdsh", "openmpi"):
            started[launcher] = Run(cluster, tmp / launcher, launcher=launcher)
        started["local"] = Run(None, tmp / "local")   # this machine, 2 ranks: DeepSpeed's local launch
        cut = other.hosts[1]
        got: dict[str, Waited] = {}
        faulted_at: dict[str, float] = {}
        finisher = threading.Thread(target=lambda: _finish_cut(got["cut"]), daemon=True)
        try:
            # Each fault goes in as soon as its run trains: a run left training while the others start only
            # slows their start (100000 steps on the same two cores).
            deadline = time.monotonic() + START_LIMIT_S
            while len(got) < len(started):
                for name, run in started.items():
                    if name in got or (pids := run.training(deadline)) is None:
                        continue
                    w = got[name] = Waited(run, pids)
                    if name == "cut":
                        other.link_down(cut)
                        finisher.start()
                        continue
                    w.before = _count_per_host(cluster, run.run_dir) if name != "local" else {"localhost": len(pids)}
                    w.everywhere = len(_anywhere(run.run_dir))  # the hosts' and the launching host's
                    run.proc.kill()
                    run.proc.communicate()
                    faulted_at[name] = time.monotonic()
                time.sleep(0.2)
            faulted.set()
            # On the hosts, and on the launching host (pdsh and mpirun: they name the run dir),
            # and no Open MPI daemon (orted names no run dir; the cut run is pdsh's and runs none).
            pending = set(KILLED)
            while pending:
                for launcher in sorted(pending):
                    w = got[launcher]
                    w.left = (_left_behind(cluster, w.run.run_dir, w.pids) if launcher != "local" else []) + \
                        _anywhere(w.run.run_dir) + (_daemons() if launcher == "openmpi" else [])
                    w.took_s = time.monotonic() - faulted_at[launcher]
                    if not w.left or w.took_s > 60:
                        pending.discard(launcher)
                time.sleep(1.0)
            finisher.join(BOUND_S + TIMEOUT_S + 120)
        finally:
            other.link_up(cut)
        got["cut"].run.earlier = cut_earlier
        return got
    finally:
        for run in started.values():
            run.kill()


def _finish_cut(w: Waited) -> None:
    """The cut run to its end (bench within BOUND_S), then its isolated rank gone (its own collective timeout)."""
    try:
        w.took_s = w.run.finish(BOUND_S)
    except BaseException as e:  # pytest.fail in a thread: keep it for the test
        w.failure = str(e)
        return
    t0 = time.monotonic()
    w.left = _wait_nothing_left(w.run.cluster, w.run.run_dir, w.pids, TIMEOUT_S + 60)
    TIMINGS["link cut: isolated rank gone after bench"] = time.monotonic() - t0


def test_link_cut_mid_run(waits):
    w = waits["cut"]
    run = w.run
    assert w.failure is None, w.failure
    TIMINGS["link cut"] = w.took_s
    cluster, cut = run.cluster, run.cluster.hosts[1]
    assert run.proc.returncode == 1, run.stderr[-3000:]
    rec = run.record()
    err = rec["error"]
    assert rec["status"] == "failed", err
    # The cut host is named: by its address (unreachable) or its rank's hostname.
    assert err["host"] in (cut, cluster.hostnames[1]), err
    assert cut in err.get("unreachable", {}), err
    # Every rank's collective timed out (their reports say which). The ranks that kept their links waited in
    # one all_reduce; the cut host's rank is named first, by its host. It waited in that all_reduce too, or
    # one apart when the cut fell inside a ring all-reduce: the others had all they needed and went on to the
    # next one while its last message was lost (CI saw #104 against #105), or the other way round.
    at = {e["rank"]: e for e in err["ranks_at"]}
    assert {(e["at"], e["source"]) for e in at.values()} == {("waiting", "report")}, at
    kept = {(e["collective"]["op"], e["collective"]["seq"], e["step"]) for r, e in at.items() if r != 1}
    assert len(kept) == 1, at
    (op, seq, step), = kept
    mine = at[1]["collective"]
    assert mine["op"] == op and abs(mine["seq"] - seq) <= 1, at
    assert err["reason"].startswith(f"hung at step {step}: rank 1 on {cluster.hostnames[1]}: its host "
                                    "stopped answering"), err["reason"]
    assert (f"waited in {op} #{seq}" in err["reason"]) and (f"{op} #{mine['seq']}" in err["reason"]), err["reason"]
    # Unreachable, its rank cannot be stopped by bench: it ended by its collective timeout.
    assert w.left == [], w.left
    _common_checks(run, *run.earlier)


KILLED = ("pdsh", "openmpi", "local")


@pytest.mark.parametrize("launcher", KILLED)
def test_sigkill_of_bench_leaves_nothing_on_any_host(waits, launcher):
    """bench SIGKILLed: its watchdog and cleanup die with it; every rank stops itself: its connection to bench's hub
    closed (bench.core.conversation), at once rather than after ORPHAN_AFTER_S without a beat."""
    from bench.core import conversation

    w = waits[launcher]
    TIMINGS[f"bench SIGKILLed ({launcher}): {w.everywhere} processes (per host {w.before}) -> 0"] = w.took_s
    assert w.left == [], w.left
    assert all(n >= 1 for n in w.before.values()), w.before  # every host ran this run's processes at the kill
    if launcher == "local":  # the node launcher and both ranks outlive bench at first
        assert w.everywhere >= 3, w.everywhere
    assert w.took_s < conversation.ORPHAN_AFTER_S  # the closed connection, not the wait for a beat
    logs = "".join(Path(p).read_text() for p in glob.glob(os.path.join(w.run.run_dir, "logs", "rank*.log")))
    assert "is orphaned: bench at" in logs and "closed the connection" in logs


def teardown_module(module) -> None:
    if TIMINGS:
        print("\nfault -> seconds to a clean exit: " + json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))
