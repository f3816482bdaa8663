"""Start the launcher, watch the ranks, and say how it ended.

The runner process gets its own session, so bench can stop it and
everything it forked (pdsh, ssh, local ranks) by process group, never by
`pkill -f`. Ranks record their PIDs in ranks/rank<R>.json-style files; a
hung run (no progress for `timeout` seconds) or Ctrl-C ends the group, then
any rank still alive, by PID.
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
            return
        except subprocess.TimeoutExpired:
            continue


class _Progress:
    def __init__(self, enabled: bool):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn("[bold]steps"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                transient=True)
            self.task = None

    def update(self, prog: dict[str, Any]) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("run", total=prog["total"], loss="-")
        self.bar.update(self.task, completed=prog["step"], loss=f"{prog['loss']:.3f}")

    def close(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.stop()


def execute(lp: LaunchPlan, run_dir: str, *, timeout: float, show_progress: bool = True) -> Outcome:
    log_path = os.path.join(run_dir, "logs", "launcher.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    progress_path = os.path.join(run_dir, "progress.json")
    t0 = time.time()
    bar = _Progress(show_progress)
    hung = False
    with open(log_path, "ab") as log:
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
            stop_group(proc, launcher=lp.launcher)
            kill_ranks(run_dir)
            kill_remote_ranks(lp, run_dir)
            bar.close()
            return Outcome("interrupted", proc.returncode, time.time() - t0,
                           error={"where": "bench", "reason": "interrupted by the user (SIGINT)"})
        finally:
            bar.close()
    rc = proc.wait()
    duration = time.time() - t0
    kill_ranks(run_dir)
    if rc != 0 or hung:
        kill_remote_ranks(lp, run_dir)
    summary = _read_json(os.path.join(run_dir, "summary.json"))
    rank_files = [r for r in (_read_json(p) for p in sorted(glob.glob(os.path.join(run_dir, "ranks", "*.json"))))
                  if r]
    if rc == 0 and summary is not None and not hung:
        return Outcome("ok", rc, duration, summary=summary, rank_files=rank_files)
    status, error = diagnose(run_dir, rc, hung, timeout, rank_files)
    return Outcome(status, rc, duration, error=error, rank_files=rank_files)


def diagnose(run_dir: str, rc: int | None, hung: bool, timeout: float,
             rank_files: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Name the failing rank (its host, reason, last log lines)."""
    broken = [r for r in rank_files if r.get("status") in ("failed", "oom")]
    if broken:
        first = broken[0]
        status = "oom" if any(r["status"] == "oom" for r in broken) else "failed"
        log = os.path.join(run_dir, "logs", f"rank{first['rank']}.log")
        return status, {"where": f"{first.get('host')}:{first['rank']}", "rank": first["rank"],
                                  "host": first.get("host"), "reason": first.get("error", ""),
                                  "log_tail": tail(log), "failed_ranks": [r["rank"] for r in broken]}
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


def _is_our_rank(pid: int, run_dir: str) -> bool:
    """A PID may have been reused: kill it only if it still runs this run's worker."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    # The run dir names this run alone; the entry point differs per launcher.
    return os.fsencode(run_dir) in argv


def kill_ranks(run_dir: str) -> list[int]:
    """Stop local ranks that outlived their launcher, by the PIDs they recorded."""
    killed = []
    for path in glob.glob(os.path.join(run_dir, "ranks", "pid-*")):
        try:
            host, pid = open(path).read().split()
        except (OSError, ValueError):
            continue
        if host != os.uname().nodename or not _is_our_rank(int(pid), run_dir):
            continue
        try:
            os.kill(int(pid), signal.SIGKILL)
            killed.append(int(pid))
        except (ProcessLookupError, PermissionError):
            pass
    return killed


# Runs on each host: kill the recorded PIDs whose host is this one and whose
# command line still names this run (a PID may have been reused).
_REMOTE_KILL = """\
import os, signal, socket, sys
run_dir, me = os.fsencode(sys.argv[1]), socket.gethostname()
for item in sys.argv[2:]:
    host, pid = item.rsplit(" ", 1)
    if host != me:
        continue
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            if run_dir not in f.read().split(b"\\0"):
                continue
        os.kill(int(pid), signal.SIGKILL)
        print("killed", pid)
    except (OSError, ValueError):
        pass
"""


def kill_remote_ranks(lp: LaunchPlan, run_dir: str) -> None:
    """Stop pdsh-started ranks on their hosts by the PIDs they recorded.

    mpirun and srun stop their own ranks when they are stopped; pdsh's ssh
    sessions have no tty, so remote ranks outlive them (and DeepSpeed's own
    remote stop is `pkill -f`, which stop_group keeps from running).
    """
    if lp.launcher != "pdsh":
        return
    from bench.remote import run_on_hosts

    entries = []
    for path in glob.glob(os.path.join(run_dir, "ranks", "pid-*")):
        with contextlib.suppress(OSError):
            entries.append(open(path).read().strip())
    plan = _read_json(os.path.join(run_dir, "plan.json")) or {}
    hosts = list(plan.get("resources", {}))
    if not entries or not hosts:
        return
    with contextlib.suppress(ValueError):  # a host name that must not reach ssh: the preflight said so
        run_on_hosts(hosts, [sys.executable, "-c", _REMOTE_KILL, run_dir, *entries], timeout=15, env=lp.env)
