"""Start the launcher, watch the ranks, and say how it ended.

The runner process gets its own session, so bench can stop it and
everything it forked (pdsh, ssh, local ranks) by process group, never by
`pkill -f`. Ranks record their PIDs in ranks/rank<R>.json-style files; a
hung run (no progress for `timeout` seconds, and at least the ranks'
collective timeout + 15 s) or Ctrl-C ends the group, then any rank still
alive, on every host, by PID (bench.cleanup).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench import memcg
from bench.launch import LaunchPlan


@dataclass
class Outcome:
    status: str                       # ok, failed, oom, interrupted
    rc: int | None
    duration_s: float
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    rank_files: list[dict[str, Any]] = field(default_factory=list)


def _read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def tail(path: str, n: int = 15) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f.readlines()[-n:]]
    except OSError:
        return []


def stop_group(proc: subprocess.Popen, grace: float = 5.0, launcher: str = "local") -> None:
    """SIGTERM the launcher's process group, SIGKILL what is left after `grace` s."""
    if launcher == "pdsh":
        # DeepSpeed's pdsh runner answers SIGTERM by running `pkill -f "<python>
        # -u -m deepspeed.launcher.launch"` on every host: every DeepSpeed job
        # there by that python dies (and where hosts share a PID namespace, the
        # whole machine's). SIGKILL leaves it no handler; kill_ranks stops ours by PID.
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
    # The runner is gone, but not always its group (DeepSpeed's launch.py still
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


class _Progress:
    def __init__(self, enabled: bool):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn("[bold]steps"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("epoch {task.fields[epoch]}"), TextColumn("loss {task.fields[loss]}"),
                                TimeElapsedColumn(), TimeRemainingColumn(), transient=True)
            self.task = None

    def update(self, prog: dict[str, Any]) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("run", total=prog["total"], loss="-", epoch="-")
        self.bar.update(self.task, completed=prog["step"], loss=f"{prog['loss']:.3f}",
                        epoch=f"{prog.get('epoch', '-')}/{prog.get('epochs', '-')}")

    def close(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.stop()


# How long past the ranks' collective timeout the watchdog waits: ranks blocked
# on a hung peer then report their own timeout first, and the one still silent
# is the culprit (with the watchdog first, every rank is silent alike).
_REPORT_GRACE_S = 15.0


def execute(lp: LaunchPlan, run_dir: str, *, timeout: float, show_progress: bool = True) -> Outcome:
    plan_timeout = (_read_json(os.path.join(run_dir, "plan.json")) or {}).get("collective_timeout_s")
    if isinstance(plan_timeout, (int, float)):
        timeout = max(timeout, plan_timeout + _REPORT_GRACE_S)
    log_path = os.path.join(run_dir, "logs", "launcher.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    progress_path = os.path.join(run_dir, "progress.json")
    t0 = time.time()
    bar = _Progress(show_progress)
    hung = False
    oom_before, vm_oom_before = memcg.oom_kills(), memcg.system_oom_kills()
    with open(log_path, "ab") as log, _sigterm_interrupts() as got:
        proc = subprocess.Popen(lp.argv, env=lp.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=run_dir)
        last_change, last_seen = time.time(), None
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                prog = _read_json(progress_path)
                marker = (prog or {}).get("time")
                if marker != last_seen:
                    last_seen, last_change = marker, time.time()
                    if prog:
                        bar.update(prog)
                elif time.time() - last_change > timeout:
                    hung = True
                    stop_group(proc, launcher=lp.launcher)
                    break
        except KeyboardInterrupt:
            # A second Ctrl-C must not cut the stop short and leave ranks behind.
            with _shielded():
                stop_group(proc, launcher=lp.launcher)
                cleanup = kill_remote_ranks(lp, run_dir)
            bar.close()
            return Outcome("interrupted", proc.returncode, time.time() - t0,
                           error={"where": "bench", "reason": f"interrupted ({got[0]})", **cleanup})
        finally:
            bar.close()
    rc = proc.wait()
    duration = time.time() - t0
    with _shielded():
        cleanup = kill_remote_ranks(lp, run_dir) if rc != 0 or hung else {}
        kill_ranks(run_dir)
    summary = _read_json(os.path.join(run_dir, "summary.json"))
    rank_files = [r for r in (_read_json(p) for p in sorted(glob.glob(os.path.join(run_dir, "ranks", "*.json"))))
                  if r]
    if rc == 0 and summary is not None and not hung:
        return Outcome("ok", rc, duration, summary=summary, rank_files=rank_files)
    oom_after = memcg.oom_kills()
    oom_killed = (f"{memcg.describe()} counted {oom_after - oom_before} OOM kill(s) during the run"
                  if oom_before is not None and oom_after is not None and oom_after > oom_before else "")
    status, error = diagnose(run_dir, rc, hung, timeout, rank_files, cleanup, oom_killed)
    vm_oom_after = memcg.system_oom_kills()
    if not oom_killed and vm_oom_before is not None and vm_oom_after is not None and vm_oom_after > vm_oom_before:
        error["hint"] = (f"the kernel OOM-killed {vm_oom_after - vm_oom_before} process(es) on this machine "
                         "during the run (/proc/vmstat oom_kill); a rank that stopped without a report may be one")
    return Outcome(status, rc, duration, error=error, rank_files=rank_files)


def diagnose(run_dir: str, rc: int | None, hung: bool, timeout: float, rank_files: list[dict[str, Any]],
             cleanup: dict[str, Any] | None = None, oom_killed: str = "") -> tuple[str, dict[str, Any]]:
    """Name the failing rank (its host, reason, last log lines).

    The first cause wins over its echoes: a rank's own error, then a host that
    stopped answering, then a rank that stopped without a report (SIGKILLed,
    OOM-killed, or hung and stopped here), and only then the ranks that failed
    because a peer went away (gloo/NCCL connection errors and timeouts).
    """
    cleanup = cleanup or {}
    broken = [r for r in rank_files if r.get("status") in ("failed", "oom")]
    reported = {r.get("rank") for r in rank_files}
    silent = [(rank, host, pid) for rank, host, pid in _recorded_ranks(run_dir) if rank not in reported]
    extra = {k: v for k, v in (("failed_ranks", [r["rank"] for r in broken]),
                               ("silent_ranks", [r for r, _, _ in silent])) if v}
    extra.update(cleanup)

    def rank_error(rank: int, host: str | None, reason: str) -> dict[str, Any]:
        return {"where": f"{host}:{rank}", "rank": rank, "host": host, "reason": reason,
                "log_tail": tail(os.path.join(run_dir, "logs", f"rank{rank}.log")), **extra}

    if oom_killed and silent:
        rank, host, _ = silent[0]
        return "oom", rank_error(rank, host, f"rank {rank} on {host} was killed by the kernel's OOM killer "
                                 f"({oom_killed}); no report from it")
    causes = [r for r in broken if not _is_echo(r.get("error", ""))]
    if any(r["status"] == "oom" for r in broken):
        first = next(r for r in broken if r["status"] == "oom")
        return "oom", rank_error(first["rank"], first.get("host"), first.get("error", ""))
    if causes:
        first = causes[0]
        return "failed", rank_error(first["rank"], first.get("host"), first.get("error", ""))
    for host, why in cleanup.get("unreachable", {}).items():
        return "failed", {"where": host, "host": host, "reason": f"host {host} stopped answering ({why}); its ranks "
                          "could not be stopped and end by their collective timeout", **extra}
    if silent:
        rank, host, pid = silent[0]
        if any(pid in pids for pids in cleanup.get("killed", {}).values()):
            how = (f"alive but silent: no progress for {timeout:.0f} s (hung), stopped by bench" if hung
                   else "alive after its launcher ended, stopped by bench")
        else:
            how = "died without a report: killed by a signal (SIGKILL, the OOM killer), or its host went away"
        return "failed", rank_error(rank, host, f"rank {rank} on {host}: {how}")
    if broken:
        first = broken[0]
        return "failed", rank_error(first["rank"], first.get("host"), first.get("error", ""))
    if hung:
        reason = f"no progress for {timeout:.0f} s: ranks hung and were stopped"
    else:
        reason = f"launcher exited with status {rc} before the ranks reported"
    # The rank whose log ends in an error, else the launcher's own log.
    logs = sorted(glob.glob(os.path.join(run_dir, "logs", "rank*.log")))
    for log in logs:
        lines = tail(log)
        if any("Error" in line or "Traceback" in line for line in lines):
            rank = os.path.basename(log)[4:-4]
            return "failed", {"where": f"rank {rank}", "reason": reason, "log_tail": lines}
    return "failed", {"where": "launcher", "reason": reason,
                                "log_tail": tail(os.path.join(run_dir, "logs", "launcher.log"))}


# What a rank says when a peer, not itself, went wrong.
_ECHOES = ("Connection closed by peer", "Connection reset", "Connection refused", "Broken pipe", "Timed out",
           "timed out", "Timeout", "connectFullMesh", "NCCL communicator was aborted", "DistBackendError")


def _is_echo(error: str) -> bool:
    return any(e in error for e in _ECHOES)


def _recorded_ranks(run_dir: str) -> list[tuple[int, str, int]]:
    from bench.cleanup import rank_pids
    return rank_pids(run_dir)


def kill_ranks(run_dir: str) -> list[int]:
    """Stop this machine's ranks that outlived their launcher, by the PIDs they recorded."""
    from bench.cleanup import kill_here
    return kill_here(run_dir)


def kill_remote_ranks(lp: LaunchPlan, run_dir: str) -> dict[str, Any]:
    """Stop the ranks here and on every other host of the plan by their recorded PIDs (bench.cleanup over ssh).

    pdsh's ssh sessions have no tty, so remote ranks outlive them; mpirun and
    srun stop their own, but a rank that ignores them (SIGSTOPped, blocked in
    the kernel) is stopped here too. DeepSpeed's own remote stop is `pkill -f`,
    which stop_group keeps from running. Returns cleanup.summary(): PIDs killed
    per host, and hosts that could not be reached.
    """
    from bench.cleanup import stop_ranks, summary
    return summary(stop_ranks(run_dir, remote=lp.launcher != "local", env=lp.env))


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM (kill, `timeout`, a scheduler) stops the run like Ctrl-C; yields [signal name]."""
    got = ["SIGINT"]

    def handler(signum, frame):
        got[0] = signal.Signals(signum).name
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield got
        return
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _shielded():
    """Ignore SIGINT and SIGTERM while the ranks are being stopped."""
    try:
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
