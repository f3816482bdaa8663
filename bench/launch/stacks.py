"""Before a hung run is stopped: ask every rank where it is, and wait a bounded few seconds for the answers.

    st = collect(hub, run_dir)      # each running rank's answer (over its connection), this host's process states

The request goes to each rank still running over its connection to bench
(bench.core.conversation): the rank's phone answers at once, on a thread of its own
(bench.worker.stall). Ranks that already ended (they reported, say a
collective timeout) are not asked; no rank is waited for past WAIT_S: a
stopped process, a host whose network is gone, or a C call holding the GIL.
For this host's ranks that did not answer, the process state is read from
/proc at once (T: stopped, D: blocked in the kernel); other hosts' come from
bench.launch.cleanup when it stops them.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any

from bench.core.conversation.hub import Hub
from bench.launch.cleanup import process_state

WAIT_S = 4.5  # a dump and a send on a busy node; the flight record follows later, not waited for


@dataclass
class Stacks:
    request: str | None
    asked: list[int] = field(default_factory=list)          # ranks still running (no report) when asked
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)     # rank -> this host's /proc state, unanswered only
    waited_s: float = 0.0
    error: str | None = None


def collect(hub: Hub, run_dir: str, wait_s: float = WAIT_S) -> Stacks:
    """Ask the running ranks for their stacks; return what came back within wait_s."""
    ranks = hub.snapshot()
    asked = sorted(r for r, s in ranks.items() if s.status is None)
    if not asked:
        return Stacks(None, asked)
    t0 = time.monotonic()
    request, answers = hub.ask(asked, wait_s)
    here = socket.gethostname()
    states = {r: s for r in asked if r not in answers and ranks[r].host == here
              for s in [process_state(ranks[r].pid, run_dir)] if s}
    return Stacks(request, asked, {r: a for r, a in answers.items() if isinstance(a, dict)}, states,
                  time.monotonic() - t0)
