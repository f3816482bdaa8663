"""Start the launcher, watch the ranks, and say how it ended.

The launcher process gets its own session, so bench can stop it and
everything it forked (pdsh, local ranks) by process group, never by
`pkill -f`; its children that left the group (pdsh's ssh: setsid) by PID
(bench.launch.strays). While it runs, bench's hub (bench.core.conversation) holds a
connection from every rank: who started, its barriers, its end and its
report, bench's pulse and the stack request all go over it, never through
the shared directory. Ranks record their PIDs in ranks/pid-<R>; a
hung run (no progress for plan.json watchdog_s: on gloo past the ranks'
collective timeout, on NCCL before it, bench.launch.plan.timeouts) or Ctrl-C
ends the group, then any rank still alive, on every host, by PID
(bench.launch.cleanup). Before a hung run is stopped, every rank is asked where it
is (bench.launch.stacks), and the record says where each one was
(bench.launch.whereabouts). The ranks' flight-recorder dumps are read
whenever flight/ holds any (NCCL's watchdog writes them itself before it
aborts a rank).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.cluster.remote import raise_open_files
from bench.core import storage
from bench.core.conversation.hub import Hub, RankState
from bench.core.conversation.planned import planned
from bench.core.errors import RunFailed, StorageFailed
from bench.core.results import write_json_atomic
from bench.launch import flight_dumps, memcg, records, stacks, strays
from bench.launch.base import LaunchPlan
from bench.launch.cleanup import kill_here
from bench.launch.diagnose import diagnose
from bench.launch.left_behind import LeftBehind
from bench.launch.registry import get
from bench.launch.signals import shielded, sigterm_interrupts


# How often bench rewrites progress.json (a person's view of a running launch; the watchdog reads the hub's): each
# rewrite is 8 requests to a network filesystem's server (benchmarks/README.md, shared_dir_ops.py).
PROGRESS_EVERY_S = 5.0


@dataclass
class Outcome:
    status: str                       # ok, failed, oom, interrupted
    rc: int | None
    duration_s: float
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    rank_files: list[dict[str, Any]] = field(default_factory=list)
    ranks: dict[int, RankState] = field(default_factory=dict)  # what each rank told bench's hub (status: its end)

    def said_ok(self, rank: int) -> bool:
        """Whether the rank told bench it ended well (its files written, fsynced and renamed before it said so)."""
        return (s := self.ranks.get(rank)) is not None and s.status == "ok"


def stop_group(proc: subprocess.Popen, grace: float = 5.0, launcher: str = "local") -> dict[int, int]:
    """SIGTERM the launcher's process group, SIGKILL what is left after `grace` s. Returns its children that had
    left the group (pdsh's ssh, bench.launch.strays), for strays.stop once the ranks are stopped: each relays its
    host's ranks' output until then, and the one to a host that no longer answers would wait on forever."""
    kids = strays.before(proc.pid)
    _stop_group(proc, grace, launcher)
    return kids


def _stop_group(proc: subprocess.Popen, grace: float, launcher: str) -> None:
    if not get(launcher).stop_with_sigterm:
        # pdsh first, by SIGKILL: nothing of it needs a graceful stop (its ssh
        # children, each in a session of its own, end with their remote command or
        # are stopped by PID after the ranks; the remote ranks outlive them and
        # kill_here / kill_remote_ranks stop them by PID). DeepSpeed's pdsh runner, which
        # bench no longer starts, answered SIGTERM with `pkill -f` on every host.
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # The launcher is gone, but not always its group (a node launcher still
    # stopping its ranks): bench returns only once nothing it started is left.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@dataclass
class _Watch:
    """What the watch of one launch saw: a hang bench's watchdog caught, and what it did about it."""
    hung: bool = False
    fired: float = 0.0                                  # when the watchdog fired (time.time())
    stalled: stacks.Stacks | None = None                # the ranks' answers to the stack request
    analyzer: subprocess.Popen | None = None            # the flight-record analyser started meanwhile (GPUs)
    timeline: dict[str, float] = field(default_factory=dict)  # seconds after the watchdog fired
    waited: float | None = None  # the silence it fired on, where shorter than the watchdog's (bench.launch.left_behind)
    hub_stopped: str | None = None  # why bench's hub stopped serving the ranks: the launch's cause
    strays: dict[int, int] = field(default_factory=dict)  # the stopped launcher's children outside its group


def _waits(plan: dict[str, Any], timeout: float) -> tuple[float, float]:
    """(how long without progress is a hang, how long before the first step), plan.json's where it has them."""
    watchdog = plan.get("watchdog_s")
    if isinstance(watchdog, (int, float)):
        timeout = float(watchdog)
    startup = plan.get("startup_s")
    return timeout, max(float(startup), timeout) if isinstance(startup, (int, float)) else timeout


def _watch(proc: subprocess.Popen, lp: LaunchPlan, run_dir: str, plan: dict[str, Any], timeout: float,
           startup: float, on_progress: Callable[[dict[str, Any]], None] | None, w: _Watch, hub: Hub) -> None:
    """Until the launcher ends: each new progress a rank told the hub to on_progress (and to progress.json, for a
    person: bench is its one writer); no progress for `timeout` (before the first step, `startup`) is a hang: every
    rank is asked where it is, then the group is stopped. KeyboardInterrupt passes through (w holds what is
    running)."""
    last_change, last_seen, written = time.time(), None, 0.0
    behind = LeftBehind(hub.done_count, plan, started=last_change)
    while proc.poll() is None:
        time.sleep(0.5)
        hub.flush_log()
        w.hub_stopped = hub.trouble()
        if w.hub_stopped is not None:  # the ranks lost bench: that, not their orphaning, is why the launch ends
            w.strays = stop_group(proc, launcher=lp.launcher)
            return
        prog = hub.progress  # checked and flat (bench.core.conversation.words): dumped, drawn, never raises
        marker = (prog or {}).get("time")
        now = time.time()
        if marker != last_seen:
            last_seen, last_change = marker, now
            if now - written >= PROGRESS_EVERY_S:  # for a person: the first at once, then every few seconds
                written = now
                with contextlib.suppress(StorageFailed):
                    write_json_atomic(os.path.join(run_dir, "progress.json"), prog)
            if prog and on_progress is not None:
                on_progress(prog)
        elif (left := behind.hung(now, last_change)) or _silent(hub, now, timeout) \
                or now - last_change > (timeout if last_seen is not None else startup):
            w.hung, w.fired = True, now
            if left:
                w.waited = now - max(last_change, behind.last_done or 0.0)
            # Before anything is stopped: where is each rank? (a few seconds, bounded)
            w.stalled = stacks.collect(hub, run_dir)
            w.timeline["answers"] = time.time() - w.fired
            w.analyzer = flight_dumps.start_analyzer(run_dir, str(plan.get("device")))  # GPUs: meanwhile
            w.strays = stop_group(proc, launcher=lp.launcher)
            w.timeline["stopped"] = time.time() - w.fired
            return


def _silent(hub: Hub, now: float, timeout: float) -> bool:
    """Whether a running rank that told bench its progress went silent past `timeout` while others went on (one
    rank's steps never hide another's hang). Beside, not instead of, the launch's own silence: once the ranks that
    reported progress have ended (their collective timed out), the one still stalled never reported any."""
    oldest = hub.oldest_progress()
    return oldest is not None and now - oldest > timeout


def _flight(run_dir: str, plan: dict[str, Any], w: _Watch) -> dict[str, Any] | None:
    """The ranks' flight records, where there are any: from bench's stack request (a hang its watchdog caught) or
    from torch itself (NCCL's watchdog dumps each rank's record on a collective timeout before it aborts it)."""
    if w.stalled is None and not flight_dumps.holds_dumps(run_dir):
        return None
    if w.stalled is not None:
        w.timeline["cleaned"] = time.time() - w.fired
    elif w.analyzer is None:
        w.analyzer = flight_dumps.start_analyzer(run_dir, str(plan.get("device")))
    flight = flight_dumps.read(run_dir)
    verdict = flight_dumps.finish_analyzer(w.analyzer)
    if flight is not None:
        flight["analyzer"] = verdict or flight_dumps.NOT_RUN
    if w.stalled is not None:
        w.timeline["analysed"] = time.time() - w.fired
    return flight


def _failure(run_dir: str, plan: dict[str, Any], rc: int | None, timeout: float, w: _Watch,
             rank_files: list[dict[str, Any]], cleanup: dict[str, Any], oom_before: int | None,
             vm_oom_before: int | None) -> tuple[str, dict[str, Any]]:
    """(status, error) of a launch that did not end well: the diagnosis, with what the machine saw beside it (OOM
    kills, a full or failing disk) and how long each step of a hang's handling took."""
    oom_after = memcg.oom_kills()
    oom_killed = (f"{memcg.describe()} counted {oom_after - oom_before} OOM kill(s) during the run"
                  if oom_before is not None and oom_after is not None and oom_after > oom_before else "")
    flight = _flight(run_dir, plan, w)
    status, error = diagnose(run_dir, rc, w.hung, timeout, rank_files, cleanup, oom_killed, w.stalled, flight,
                             w.hub_stopped)
    if w.timeline and "hang" in error:
        error["hang"]["seconds_after_watchdog"] = {k: round(v, 2) for k, v in w.timeline.items()}
    disk = storage.problem(run_dir)
    if disk:
        # The ranks write their figures and logs there: the likely cause, whatever the logs could say.
        error["storage"] = disk
        error["reason"] = f"{disk}; {error.get('reason') or ''}".rstrip("; ")
    vm_oom_after = memcg.system_oom_kills()
    if not oom_killed and vm_oom_before is not None and vm_oom_after is not None and vm_oom_after > vm_oom_before:
        error["hint"] = (f"the kernel OOM-killed {vm_oom_after - vm_oom_before} process(es) on this machine "
                         "during the run (/proc/vmstat oom_kill); a rank that stopped without a report may be one")
    return status, error


def execute(lp: LaunchPlan, run_dir: str, *, timeout: float,
            on_progress: Callable[[dict[str, Any]], None] | None = None, expect_summary: bool = True) -> Outcome:
    """Run the plan to its end; on_progress gets each new progress.json the ranks write (a bar, say).

    expect_summary False: the ranks report one by one (an independent run writes alone/rank<R>.json, no
    summary.json), so a clean exit of every rank is the whole of "ok".
    """
    plan = records.read_plan(run_dir)
    timeout, startup = _waits(plan, timeout)
    log_path = os.path.join(storage.subdir(run_dir, "logs"), "launcher.log")
    t0 = time.time()
    w = _Watch()
    oom_before, vm_oom_before = memcg.oom_kills(), memcg.system_oom_kills()
    try:
        log = open(log_path, "ab")
    except OSError as e:
        raise StorageFailed(log_path, e.strerror or str(e)) from None
    # The launcher's descriptors, and the hub's: one connection per rank.
    raise_open_files(max(lp.open_files, int(plan.get("world_size") or 0) + 1024))
    records.make_dirs(run_dir, plan)
    # The ranks dial this hub as they start, and stop by themselves once it is gone (bench.core.conversation).
    try:
        opened = Hub.open(run_dir, toward=[lp.master_addr, *(plan.get("resources") or {})],
                          world=max(1, int(plan.get("world_size") or 0)), barriers=planned(plan),
                          start_s=startup)
    except (OSError, StorageFailed) as e:  # nothing of the hub is left open (Hub.open)
        log.close()
        if isinstance(e, StorageFailed):
            raise
        raise RunFailed(f"cannot open bench's hub for the ranks: {e.strerror or e}") from None
    with log, sigterm_interrupts() as got, opened as hub:
        proc = subprocess.Popen(lp.argv, env=lp.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=run_dir)
        try:
            _watch(proc, lp, run_dir, plan, timeout, startup, on_progress, w, hub)
        except KeyboardInterrupt:
            # A second Ctrl-C must not cut the stop short and leave ranks behind.
            if w.analyzer is not None:
                w.analyzer.kill()
            with shielded():
                kids = stop_group(proc, launcher=lp.launcher)
                cleanup = kill_remote_ranks(lp, run_dir)
                strays.stop(kids)
            return Outcome("interrupted", proc.returncode, time.time() - t0,
                           error={"where": "bench", "reason": f"interrupted ({got[0]})", **cleanup},
                           ranks=hub.snapshot())
        rc = proc.wait()
        ranks = hub.snapshot()
    duration = time.time() - t0
    with shielded():
        cleanup = kill_remote_ranks(lp, run_dir, ranks) if rc != 0 or w.hung or w.hub_stopped else {}
        kill_here(run_dir)  # this machine's ranks that outlived their launcher, by the PIDs they recorded
        strays.stop(w.strays)  # the ranks stopped: an ssh still waiting is on a host that does not answer
    records.keep_ranks(run_dir, ranks)
    summary, missing = (records.read_rank(run_dir, "summary.json", 0, ranks) if expect_summary and rc == 0
                        else (None, None))
    rank_files = records.rank_reports(run_dir, ranks, int(plan.get("world_size") or 0))
    if missing:
        return Outcome("failed", rc, duration, error={"where": "rank 0", "reason": missing}, rank_files=rank_files,
                       ranks=ranks)
    if rc == 0 and (summary is not None or not expect_summary) and not w.hung and not w.hub_stopped:
        return Outcome("ok", rc, duration, summary=summary, rank_files=rank_files, ranks=ranks)
    status, error = _failure(run_dir, plan, rc, w.waited or timeout, w, rank_files, cleanup, oom_before,
                             vm_oom_before)
    return Outcome(status, rc, duration, error=error, rank_files=rank_files, ranks=ranks)


def kill_remote_ranks(lp: LaunchPlan, run_dir: str, ranks: dict[int, RankState] | None = None) -> dict[str, Any]:
    """Stop the ranks here and on every other host of the plan by their recorded PIDs (bench.launch.cleanup over ssh).

    pdsh's ssh sessions have no tty, so remote ranks outlive them; mpirun and
    srun stop their own, but a rank that ignores them (SIGSTOPped, blocked in
    the kernel) is stopped here too (never by `pkill -f`, DeepSpeed's pdsh
    runner's own remote stop, which bench does not start). ranks: the hub's view; where every rank that recorded
    a PID has ended, no other host is reached. Returns cleanup.summary(): PIDs killed per host, and hosts that
    could not be reached.
    """
    from bench.launch.cleanup import stop_ranks, summary
    ended = None if ranks is None else {r for r, st in ranks.items() if st.status is not None}
    return summary(stop_ranks(run_dir, remote=get(lp.launcher).remote, env=lp.env, ended=ended))
