"""Before a hung run is stopped: ask every rank where it is, and wait a bounded few seconds for the answers.

    st = collect(hub, run_dir)      # each running rank's answer (over its connection), this host's process states

The request goes to each rank still running over its connection to bench
(bench.core.conversation): the rank's phone answers at once, on a thread of its own
(bench.worker.stall). Ranks that already ended (they reported, say a
collective timeout) are not asked; no rank is waited for past WAIT_S: a
stopped process, a host whose network is gone, or a C call holding the GIL.
A rank answers twice: its stacks at once, then again once its flight
record is dumped (flight/rank<R>, which says who issued one collective
less). The ranks that answered are given DUMP_WAIT_S more for that second
answer before bench stops the group: a CI run on a loaded machine stopped
them while they dumped, and the verdict lost the recorder's word on the
rank behind. NCCL's recorder can block on a hung GPU: hence a bound.
For this host's ranks that did not answer, the process state is read from
/proc at once (T: stopped, D: blocked in the kernel); other hosts' come from
bench.launch.cleanup when it stops them.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any

from bench.core import conversation as talk
from bench.core.conversation.hub import Hub
from bench.launch.cleanup import process_state

WAIT_S = 4.5  # a dump and a send on a busy node
DUMP_WAIT_S = 5.0  # then the flight records of the ranks that answered: torch's dump with its stack traces


@dataclass
class Stacks:
    request: str | None
    asked: list[int] = field(default_factory=list)          # ranks still running (no report) when asked
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)     # rank -> this host's /proc state, unanswered only
    waited_s: float = 0.0
    error: str | None = None


def _dumped(answer: Any) -> bool:
    return not isinstance(answer, dict) or (answer.get("flight_recorder") or {}).get("reason") != talk.DUMPING


def collect(hub: Hub, run_dir: str, wait_s: float = WAIT_S, dump_wait_s: float = DUMP_WAIT_S) -> Stacks:
    """Ask the running ranks for their stacks; return what came back within wait_s, and what the ranks that
    answered said within dump_wait_s more, once their flight records were dumped."""
    ranks = hub.snapshot()
    asked = sorted(r for r, s in ranks.items() if s.status is None)
    if not asked:
        return Stacks(None, asked)
    t0 = time.monotonic()
    request, answers = hub.ask(asked, wait_s)
    if answers:
        answers.update(hub.follow_up(request, sorted(answers), _dumped, dump_wait_s))
    here = socket.gethostname()
    states = {r: s for r in asked if r not in answers and ranks[r].host == here
              for s in [process_state(ranks[r].pid, run_dir)] if s}
    return Stacks(request, asked, {r: a for r, a in answers.items() if isinstance(a, dict)}, states,
                  time.monotonic() - t0)
