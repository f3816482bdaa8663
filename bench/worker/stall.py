"""A rank's answer to bench's stack request: every thread's Python stack, its position, its flight record.

    answer(run_dir, rank, host, request, send)   # the phone's answer thread, when bench asks (bench.core.conversation)

Sends the answer to bench over the rank's connection (what bench.launch.whereabouts
reads), keeps it in stacks/rank<R>.json for a person, and prints the same stacks into the rank's log (faulthandler's format, every
thread), so a person reading logs/rank<R>.log sees where it was too.

It runs on a thread the phone starts for it (its reader goes on hearing
bench's beat meanwhile), not in a signal handler: the training thread
may be blocked anywhere (a collective, data loading, a sleep in someone
else's code), and only needs to have let go of the GIL, which every
blocking call in torch, gloo, NCCL and the standard library does. A rank
that cannot answer (stopped by SIGSTOP, its host or file system gone, a C
call holding the GIL) says nothing, and bench names it as the one that did
not answer.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable

from bench.core import conversation as talk
from bench.core.results import write_json_atomic
from bench.core.storage import subdir
from bench.worker import flight
from bench.worker.position import POSITION

STACKS_DIR = "stacks"
_BENCH_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MAX_FRAMES = 60  # innermost kept: what a hang is about is at the bottom of the stack


def _where(filename: str) -> str:
    """bench's own files relative to the checkout (bench/worker/data.py); others (and "<frozen runpy>") as they are."""
    if filename.startswith("<"):
        return filename
    path = os.path.abspath(filename)
    return os.path.relpath(path, _BENCH_ROOT) if path.startswith(os.path.join(_BENCH_ROOT, "bench") + os.sep) else path


def thread_stacks(skip: int | None = None) -> list[dict[str, Any]]:
    """Every Python thread's stack, outermost frame first, the main thread first; `skip` a thread ident."""
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        t = names.get(ident)
        frames = [{"file": _where(f.filename), "line": f.lineno, "function": f.name, "code": (f.line or "")[:160]}
                  for f in traceback.extract_stack(frame)[-_MAX_FRAMES:]]
        out.append({"thread": t.name if t else f"thread {ident}", "main": t is threading.main_thread(),
                    "daemon": bool(t and t.daemon), "frames": frames})
    return sorted(out, key=lambda s: not s["main"])


def answer(run_dir: str, rank: int, host: str | None, request: str,
           send: Callable[[dict[str, Any]], Any] = lambda said: None) -> None:
    """Send bench this rank's stacks for `request` (and keep them in stacks/rank<R>.json for a person), print
    them into its log, then dump its flight record and send again; never raises (its thread's failure would
    say nothing to bench)."""
    host = host or socket.gethostname()
    try:
        path = os.path.join(subdir(run_dir, STACKS_DIR), f"rank{rank}.json")
        position = POSITION.snapshot()
        said = {"request": request, "rank": rank, "host": host, "pid": os.getpid(), "time": time.time(),
                "position": position, "threads": thread_stacks(skip=threading.get_ident()),
                "flight_recorder": {"path": None, "reason": talk.DUMPING}}
        # The stacks first: a recorder that blocks (NCCL's, asking a hung GPU) must not cost them.
        send(said)
        write_json_atomic(path, said)
    except Exception as e:  # noqa: BLE001 - said in the log, if the log can be written
        with contextlib.suppress(OSError):
            print(f"[{host}:{rank}] could not answer bench's stack request: {type(e).__name__}: {e}", flush=True)
        return
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        flying = ", ".join(f"{c['op']} #{c['seq']}" for c in position["in_flight"]) or "none"
        print(f"[{host}:{rank}] stack requested by bench ({request}): step {position['step']}, last collective "
              f"#{position['seq']}, in flight: {flying}; every thread follows", flush=True)
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    try:
        said["flight_recorder"] = flight.dump(run_dir, rank)
    except Exception as e:  # noqa: BLE001 - said in the answer
        said["flight_recorder"] = {"path": None, "reason": f"{type(e).__name__}: {e}"[:200]}
    with contextlib.suppress(Exception):
        send(said)
        write_json_atomic(path, said)
