"""A rank's end of the conversation with bench (bench.core.conversation): one connection, a reader thread.

    phone = Phone.dial(run_dir, rank, host)   # None: no hub.json (a rank started by hand); OSError: bench unreachable
    phone.listen(on_orphan, on_request)       # the reader: beats, go, stack requests
    phone.started(); waited, why = phone.enter("steps", count=8, timeout_s=120, per_rank=True)
    phone.done("failed", report)

Standard library only: a rank dials before it imports torch. Every send is
one line under a lock, from whichever thread (the training thread's enter and
done, the reader's stack answers); a send that fails (bench gone) is dropped:
the reader then calls on_orphan.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import Any, Callable

from bench.core import conversation as talk

# This process's phone, once bootstrap dialled (bench.worker.barrier and the progress writers use it).
CURRENT: Phone | None = None
Reply = Callable[[str, Callable[[dict[str, Any]], bool]], None]


class Phone:
    def __init__(self, sock: socket.socket, where: str):
        self.sock, self.where = sock, where
        self._lock = threading.Lock()
        self._go: dict[str, str] = {}
        self._cv = threading.Condition()
        self.last_beat = time.monotonic()
        self._reader: threading.Thread | None = None

    @classmethod
    def dial(cls, run_dir: str, rank: int, host: str, wait_s: float = talk.DIAL_S) -> Phone | None:
        """Connect to the launch's hub and say hello; None when the run has no hub.json (no bench behind it).
        Raises OSError (naming bench's address) when bench cannot be reached within wait_s."""
        try:
            with open(os.path.join(run_dir, talk.NAME)) as f:
                hub = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise OSError(f"cannot read {os.path.join(run_dir, talk.NAME)}: {e}") from None
        where = f"{hub['addr']}:{hub['port']}"
        deadline = time.monotonic() + wait_s
        while True:
            try:
                sock = socket.create_connection((hub["addr"], int(hub["port"])), timeout=5)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise OSError(f"cannot reach bench at {where} from {host} for {wait_s:.0f} s: "
                                  f"{e.strerror or e} (the nodes must reach the host bench runs on over TCP)") from None
                time.sleep(0.5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        phone = cls(sock, where)
        phone._say({"op": "hello", "token": hub["token"], "rank": rank, "host": host, "pid": os.getpid()})
        return phone

    def _say(self, msg: dict[str, Any]) -> bool:
        data = (json.dumps(msg) + "\n").encode()
        with self._lock:
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                return False

    def listen(self, on_orphan: Callable[[str], None], on_request: Reply | None,
               orphan_after_s: float = talk.ORPHAN_AFTER_S) -> threading.Thread:
        """The reader thread: records beats and barrier releases, answers stack requests (on_request(id, send):
        send(answer) as often as the answer grows), and calls on_orphan(why) once when the connection closes or
        no beat came for orphan_after_s."""

        def loop() -> None:
            buf = b""
            self.sock.settimeout(1.0)
            while True:
                try:
                    data = self.sock.recv(65536)
                    if not data:
                        return on_orphan(f"bench at {self.where} closed the connection (the bench process that "
                                         "started this run is gone)")
                except socket.timeout:
                    data = b""
                except OSError as e:
                    return on_orphan(f"the connection to bench at {self.where} broke: {e.strerror or e}")
                *lines, buf = (buf + data).split(b"\n")
                for line in lines:
                    with contextlib.suppress(ValueError):
                        self._heard(json.loads(line), on_request)
                silent = time.monotonic() - self.last_beat
                if silent > orphan_after_s:
                    return on_orphan(f"no beat from bench at {self.where} for {silent:.0f} s")

        self._reader = threading.Thread(target=loop, name="bench-phone", daemon=True)
        self._reader.start()
        return self._reader

    def _heard(self, msg: Any, on_request: Reply | None) -> None:
        if not isinstance(msg, dict):
            return
        op = msg.get("op")
        if op == "beat":
            self.last_beat = time.monotonic()
        elif op == "go":
            with self._cv:
                self._go[str(msg.get("barrier"))] = str(msg.get("why"))
                self._cv.notify_all()
        elif op == "stacks?" and on_request is not None:
            request = str(msg.get("request"))
            on_request(request, lambda answer: self._say({"op": "stacks", "request": request, "answer": answer}))

    def started(self) -> None:
        self._say({"op": "started", "at": time.time()})

    def progress(self, progress: dict[str, Any]) -> None:
        self._say({"op": "progress", "progress": progress})

    def enter(self, barrier: str, count: int, timeout_s: float, per_rank: bool) -> tuple[float, str | None]:
        """Wait at a start barrier; (seconds waited, why it was released, None when timeout_s ran out)."""
        if self._reader is None:  # a phone nobody listens on (no guard asked for): read for the barrier only
            self.listen(lambda why: None, None, orphan_after_s=float("inf"))
        t0 = time.monotonic()
        self._say({"op": "enter", "barrier": barrier, "count": count, "per_rank": per_rank})
        with self._cv:
            self._cv.wait_for(lambda: barrier in self._go, timeout_s)
            return time.monotonic() - t0, self._go.get(barrier)

    def done(self, status: str, report: dict[str, Any] | None = None) -> None:
        self._say({"op": "done", "status": status, "report": report})
