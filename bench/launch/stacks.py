"""Before a hung run is stopped: ask every rank where it is, and wait a bounded few seconds for the answers.

    st = collect(run_dir)           # stacks/rank<R>.json of each rank still running, this host's process states

The request travels through the run directory (bench.core.heartbeat.ask):
every rank's heartbeat watcher looks every WATCH_S and answers within it
(bench.worker.stall). Ranks that already reported (ranks/rank<R>.json: they
failed, say by a collective timeout) are not waited for; neither is a rank
past WAIT_S: a stopped process, a host whose storage is gone, or a C call
holding the GIL. For this host's ranks that did not answer, the process
state is read from /proc at once (T: stopped, D: blocked in the kernel);
other hosts' come from bench.launch.cleanup when it stops them.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from bench.core import heartbeat
from bench.launch.cleanup import process_state, rank_pids

WAIT_S = heartbeat.WATCH_S + 2.5  # one look of every watcher, and a dump and a write on a busy node
STACKS_DIR = "stacks"


@dataclass
class Stacks:
    request: str | None
    asked: list[int] = field(default_factory=list)          # ranks still running (no report) when asked
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)     # rank -> this host's /proc state, unanswered only
    waited_s: float = 0.0
    error: str | None = None


def _answer(run_dir: str, rank: int, request: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, STACKS_DIR, f"rank{rank}.json")) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) and got.get("request") == request else None


def collect(run_dir: str, wait_s: float = WAIT_S) -> Stacks:
    """Ask the running ranks for their stacks; return what came back within wait_s."""
    reported = {int(n[4:-5]) for n in _listdir(os.path.join(run_dir, "ranks"))
                if n.startswith("rank") and n.endswith(".json") and n[4:-5].isdigit()}
    ranks = rank_pids(run_dir)
    asked = [r for r, _, _ in ranks if r not in reported]
    t0 = time.monotonic()
    if not asked:
        return Stacks(None, asked)
    try:
        request = heartbeat.ask(run_dir)
    except OSError as e:
        return Stacks(None, asked, error=f"could not write the stack request: {e.strerror or e}")
    answers: dict[int, dict[str, Any]] = {}
    while True:
        for r in asked:
            if r not in answers:
                got = _answer(run_dir, r, request)
                if got is not None:
                    answers[r] = got
        if len(answers) == len(asked) or time.monotonic() - t0 > wait_s:
            break
        time.sleep(0.2)
    here = socket.gethostname()
    states = {r: s for r, host, pid in ranks if r in asked and r not in answers and host == here
              for s in [process_state(pid, run_dir)] if s}
    return Stacks(request, asked, answers, states, time.monotonic() - t0)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
