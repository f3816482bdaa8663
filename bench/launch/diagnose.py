"""How a run that did not end well ended: the failing rank, its host, the reason and its last log lines.

    status, error = diagnose(run_dir, rc, hung, timeout, rank_files, cleanup, oom_killed)

The first cause wins over its echoes (see diagnose). Reads only the run
directory: the ranks' reports (ranks/rank<R>.json), their PID files and logs.
"""

from __future__ import annotations

import glob
import os
from typing import Any

from bench.launch.cleanup import rank_pids


def tail(path: str, n: int = 15) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f.readlines()[-n:]]
    except OSError:
        return []


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
    silent = [(rank, host, pid) for rank, host, pid in rank_pids(run_dir) if rank not in reported]
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
