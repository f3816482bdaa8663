"""bench's pulse in the run directory, so that no rank outlives the bench process that started it.

    with beating(run_dir):                    # bench, while its job runs: a counter rewritten every BEAT_S
        ...
    watch(run_dir, ORPHAN_AFTER_S, on_orphan, on_request)  # each rank, from its first line: a daemon thread
    ask(run_dir)                              # bench, when a run hangs: every rank's watcher calls on_request

When `bench` dies for any reason (SIGKILL, the OOM killer, the login shell
gone) its watchdog and cleanup die with it, and no launcher stops the ranks
on its own (remote ranks outlive the ssh sessions pdsh started them in). So every rank watches the file `heartbeat` in the run
directory, which every host shares (the preflight checks it): when the
counter has not changed for ORPHAN_AFTER_S of the rank's own clock, the
rank says so in its log and exits; its per-node launcher (bench.launch.node,
orted, srun) then ends as it does for any rank that exits
non-zero. No PID or name crosses hosts: the counter is compared with the
rank's previous reading, never with a time written by another machine.

The file is opened for every beat and every reading: NFS's close-to-open
consistency then shows a reader the last closed write, whatever the
attribute cache. A beat overwrites the same few bytes in place, so it
needs no new block on a full disk.

Bound: a rank exits at most ORPHAN_AFTER_S + WATCH_S after the last beat
(20 + 2 s), and its launcher within a few seconds of that; 30 s in all is
what docs/reliability.md promises and the tests allow twice over.

The same thread answers bench's requests for stacks (bench.worker.stall):
bench writes a request id to `stack-request` in the run directory, and each
watcher that reads a new id calls on_request(id) within WATCH_S. A file
rather than a signal (faulthandler.register): the run directory is the one
channel bench already shares with every rank under every launcher. A signal
needs the rank's PID in bench's PID namespace and a way onto its node:
inside a container (its own PID namespace) the recorded PID is not the
host's; under Slurm ssh to a node may be refused (pam_slurm_adopt) and
`scancel --signal` reaches the launchers too; over pdsh and mpirun it takes
an ssh per host while the run hangs, and a host whose network is gone
cannot be signalled at all. Ranks already read this directory every
WATCH_S, so asking costs them nothing new. What a file cannot do that a
signal's C handler can: answer while a C call holds the GIL; such a rank is
named as the one that did not answer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Callable, Iterator

NAME = "heartbeat"
REQUEST = "stack-request"
BEAT_S = 2.0
WATCH_S = 2.0
ORPHAN_AFTER_S = 20.0
WIDTH = 20  # the counter, zero-padded: every beat writes the same bytes of the same block


def path_of(run_dir: str) -> str:
    return os.path.join(run_dir, NAME)


def beat(run_dir: str, count: int) -> None:
    """Write the counter in place (made if missing); OSError is the caller's."""
    fd = os.open(path_of(run_dir), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, f"{count:0{WIDTH}d}\n".encode(), 0)
    finally:
        os.close(fd)


@contextlib.contextmanager
def beating(run_dir: str, every_s: float = BEAT_S) -> Iterator[None]:
    """Beat every every_s seconds while the block runs; stop (and remove the file) after it.

    A beat that cannot be written (disk gone, read-only) is skipped, not
    fatal: the ranks then stop on their own, as they would if bench died,
    and the job's own error says what happened to the storage.
    """
    stop = threading.Event()
    count = [0]

    def loop() -> None:
        while True:
            count[0] += 1
            with contextlib.suppress(OSError):
                beat(run_dir, count[0])
            if stop.wait(every_s):
                return

    with contextlib.suppress(OSError):
        beat(run_dir, 0)  # there before any rank starts to look
    t = threading.Thread(target=loop, name="bench-heartbeat", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        with contextlib.suppress(OSError):
            os.unlink(path_of(run_dir))


def read(run_dir: str) -> bytes | None:
    try:
        with open(path_of(run_dir), "rb") as f:
            return f.read(WIDTH + 1)
    except OSError:
        return None


def ask(run_dir: str) -> str:
    """Ask every rank's watcher for its stacks: a new request id in the run directory (returned); OSError is the
    caller's."""
    request = f"{time.time():.6f}-{os.getpid()}"
    path = os.path.join(run_dir, REQUEST)
    with open(f"{path}.tmp", "w") as f:
        f.write(request + "\n")
    os.replace(f"{path}.tmp", path)
    return request


def read_request(run_dir: str) -> str | None:
    try:
        with open(os.path.join(run_dir, REQUEST)) as f:
            return f.read(200).strip() or None
    except OSError:
        return None


def watch(run_dir: str, orphan_after_s: float, on_orphan: Callable[[float], None],
          on_request: Callable[[str], None] | None = None, every_s: float = WATCH_S) -> threading.Thread:
    """A daemon thread that calls on_orphan(seconds without a beat) once no beat came for orphan_after_s,
    and on_request(id) for each new stack request (none that was there before it started)."""

    def loop() -> None:
        seen, changed = read(run_dir), time.monotonic()
        answered = read_request(run_dir)
        while True:
            time.sleep(every_s)
            if on_request is not None:
                request = read_request(run_dir)
                if request is not None and request != answered:
                    answered = request
                    on_request(request)
            now, current = time.monotonic(), read(run_dir)
            if current != seen:
                seen, changed = current, now
            elif now - changed > orphan_after_s:
                on_orphan(now - changed)
                return

    t = threading.Thread(target=loop, name="bench-orphan-guard", daemon=True)
    t.start()
    return t
