"""How a run that did not end well ended: the failing rank, its host, the reason and its last log lines.

    status, error = diagnose(run_dir, rc, hung, timeout, rank_files, cleanup, oom_killed, stalled, flight, hub_stopped)

The first cause wins over its echoes (see diagnose); bench's own hub that
stopped serving the ranks comes before any of theirs. Reads only the run
directory: the ranks' reports (ranks/rank<R>.json), their PID files and logs,
their answers to the stack request of a hung run (stacks/rank<R>.json, see
bench.launch.whereabouts), what NCCL's watchdog wrote in their logs before it
took them down (bench.launch.nccl_watchdog) and the launcher's log
(bench.launch.exits). A rank NCCL's watchdog took down after its own
collective timed out died of SIGABRT like the culprit: it is an echo, and
the culprit is the rank the watchdogs' counts (and the flight recorder's
dumps) show outside the collective the others timed out in.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bench.launch import exits, nccl_watchdog, whereabouts
from bench.launch.cleanup import rank_pids
from bench.launch.stacks import Stacks


def tail(path: str, n: int = 15) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f.readlines()[-n:]]
    except OSError:
        return []


def _plan(run_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(run_dir, "plan.json")) as f:
            plan = json.load(f)
    except (OSError, ValueError):
        return {}
    return plan if isinstance(plan, dict) else {}


def _hang(run_dir: str, ranks: list, said: dict, rank_files: list[dict[str, Any]], cleanup: dict[str, Any],
          stalled: Stacks, flight: dict[str, Any] | None) -> tuple[whereabouts.Verdict, dict[str, Any]]:
    """Where each rank of a hung run was (its answers to bench's stack request), and what the record says of it."""
    plan = _plan(run_dir)
    aborted = {r: "NCCL's watchdog took it down after its own collective timed out" for r, x in said.items() if x.own}
    hang = whereabouts.verdict(ranks, stalled.answers, {r["rank"]: r for r in rank_files if "rank" in r}, cleanup,
                               flight, plan.get("resources") or {}, str(plan.get("device", "cpu")), stalled.states,
                               aborted)
    extra = {"ranks_at": hang.ranks_at,
             "hang": {"step": hang.step, "waited_in": hang.waited, "odd_ranks": [e["rank"] for e in hang.odd],
                      "stack_request": {"asked": stalled.asked, "answered": sorted(stalled.answers),
                                        "waited_s": round(stalled.waited_s, 2), "error": stalled.error}}}
    if flight is not None:
        extra["hang"]["flight_recorder"] = {k: v for k, v in flight.items() if k != "ranks"}
    return hang, extra


def _silent_how(run_dir: str, silent: list[tuple[int, str, int]], cleanup: dict[str, Any], hung: bool,
                timeout: float, extra: dict[str, Any]) -> str:
    """How the first rank that left no report ended (a signal its launcher named goes into extra)."""
    rank, _, pid = silent[0]
    if any(pid in pids for pids in cleanup.get("killed", {}).values()):
        return (f"alive but silent: no progress for {timeout:.0f} s (hung), stopped by bench" if hung
                else "alive after its launcher ended, stopped by bench")
    if (sig := exits.signals(run_dir, silent).get(rank)) is not None:
        extra["signal"] = sig
        return f"died without a report: killed by {sig}" + (" (kill -9, or the kernel's OOM killer)"
                                                            if sig == "SIGKILL" else "")
    return "died without a report: killed by a signal (SIGKILL, the OOM killer), or its host went away"


def _from_logs(run_dir: str, rc: int | None, hung: bool, timeout: float) -> dict[str, Any]:
    """No rank said anything: the rank whose log ends in an error, else the launcher's own log."""
    reason = (f"no progress for {timeout:.0f} s: ranks hung and were stopped" if hung
              else f"launcher exited with status {rc} before the ranks reported")
    for rank in range(int(_plan(run_dir).get("world_size") or 0)):
        log = os.path.join(run_dir, "logs", f"rank{rank}.log")  # by name: a listing may be stale on NFS
        lines = tail(log)
        if any("Error" in line or "Traceback" in line for line in lines):
            return {"where": f"rank {rank}", "reason": reason, "log_tail": lines}
    return {"where": "launcher", "reason": reason, "log_tail": tail(os.path.join(run_dir, "logs", "launcher.log"))}


def diagnose(run_dir: str, rc: int | None, hung: bool, timeout: float, rank_files: list[dict[str, Any]],
             cleanup: dict[str, Any] | None = None, oom_killed: str = "", stalled: Stacks | None = None,
             flight: dict[str, Any] | None = None, hub_stopped: str | None = None) -> tuple[str, dict[str, Any]]:
    """Name the failing rank (its host, reason, last log lines).

    The first cause wins over its echoes: bench's hub that stopped (hub_stopped: why; every rank then lost
    bench, and their orphaning is its echo), a rank's own error, then, for a run
    that hung (stalled: the ranks' answers to bench's stack request), the ranks
    that stand out from where the others waited (whereabouts), then a host that
    stopped answering, then a rank that stopped without a report (SIGKILLed,
    OOM-killed, or hung and stopped here; the signal named where its launcher
    said it), and only then the ranks that failed because a peer went away
    (gloo/NCCL connection errors and timeouts).
    """
    cleanup = cleanup or {}
    broken = [r for r in rank_files if r.get("status") in ("failed", "oom")]
    reported = {r.get("rank") for r in rank_files}
    ranks = rank_pids(run_dir)
    silent = [(rank, host, pid) for rank, host, pid in ranks if rank not in reported]
    extra = {k: v for k, v in (("failed_ranks", [r["rank"] for r in broken]),
                               ("silent_ranks", [r for r, _, _ in silent])) if v}
    extra.update(cleanup)
    said = nccl_watchdog.read(run_dir, [r for r, _, _ in ranks])
    nccl = nccl_watchdog.verdict(said, ranks, flight)
    if nccl is not None:
        extra["nccl_watchdog"] = {"waited_in": nccl.waited, "odd_ranks": [e["rank"] for e in nccl.odd],
                                  "ranks_at": nccl.ranks_at}
    hang = None
    if hung and stalled is not None and ranks:
        hang, more = _hang(run_dir, ranks, said, rank_files, cleanup, stalled, flight)
        extra.update(more)

    def rank_error(rank: int, host: str | None, reason: str) -> dict[str, Any]:
        return {"where": f"{host}:{rank}", "rank": rank, "host": host, "reason": reason,
                "log_tail": tail(os.path.join(run_dir, "logs", f"rank{rank}.log")), **extra}

    def everyone(reason: str) -> dict[str, Any]:
        return {"where": "every rank", "rank": None, "host": None, "reason": reason, **extra}

    if hub_stopped:
        return "failed", {"where": "bench", "rank": None, "host": None, "reason": f"bench's hub stopped: {hub_stopped}",
                          **extra}
    if oom_killed and silent:
        rank, host, _ = silent[0]
        return "oom", rank_error(rank, host, f"rank {rank} on {host} was killed by the kernel's OOM killer "
                                 f"({oom_killed}); no report from it")
    causes = [r for r in broken if not _is_echo(r.get("error", ""))]
    if any(r["status"] == "oom" for r in broken):
        first = next(r for r in broken if r["status"] == "oom")
        return "oom", rank_error(first["rank"], first.get("host"), first.get("error", ""))
    if causes:
        return "failed", rank_error(causes[0]["rank"], causes[0].get("host"), causes[0].get("error", ""))
    if hang is not None and hang.odd:
        return "failed", rank_error(hang.odd[0]["rank"], hang.odd[0]["host"], hang.reason)
    if nccl is not None:
        # NCCL's watchdog ended the run (or the hang's stacks name no one): its counts name the rank, not the
        # order in which the SIGABRTed ranks were found.
        extra.setdefault("ranks_at", nccl.ranks_at)
        if nccl.odd:
            return "failed", rank_error(nccl.odd[0]["rank"], nccl.odd[0]["host"], nccl.reason)
        if nccl.waited is not None:
            return "failed", everyone(nccl.reason)
    if hang is not None and hang.waited is not None:
        return "failed", everyone(hang.reason)
    for host, why in cleanup.get("unreachable", {}).items():
        return "failed", {"where": host, "host": host, "reason": f"host {host} stopped answering ({why}); its ranks "
                          "could not be stopped and end by their collective timeout", **extra}
    if silent:
        rank, host, _ = silent[0]
        how = _silent_how(run_dir, silent, cleanup, hung, timeout, extra)
        return "failed", rank_error(rank, host, f"rank {rank} on {host}: {how}")
    if broken:
        return "failed", rank_error(broken[0]["rank"], broken[0].get("host"), broken[0].get("error", ""))
    return "failed", _from_logs(run_dir, rc, hung, timeout)


# What a rank says when a peer, not itself, went wrong.
_ECHOES = ("Connection closed by peer", "Connection reset", "Connection refused", "Broken pipe", "Timed out",
           "timed out", "Timeout", "connectFullMesh", "NCCL communicator was aborted", "DistBackendError",
           "Orphaned: ")  # a rank that lost bench (its link gone, or bench gone): never the cause itself


def _is_echo(error: str) -> bool:
    return any(e in error for e in _ECHOES)
