"""A rank's end of the conversation with bench (bench.core.conversation): one connection, a reader thread.

    phone = Phone.dial(run_dir, rank, host)   # welcomed; None: no hub.json (a rank started by hand); OSError:
                                              # bench unreachable, or its rank taken (Refused)
    phone.listen(on_orphan, on_request)       # the reader: beats, go, stack requests (answered on a thread of their own)
    phone.started(); waited, why = phone.enter("steps", timeout_s=120, per_rank=True)
    phone.done("failed", report)              # returns once bench read it and closed (or DONE_ACK_S passed)

Standard library only: a rank dials before it imports torch. Every send is
one whole line under one lock, from whichever thread (the training thread's
enter and done, the answer thread's stacks), within SEND_S: a send that
fails or is cut short breaks the connection for good (half a line would
glue to the next message), and the reader then calls on_orphan saying so. A
message over MAX_LINE is cut to fit (fit). A stack request is answered on a
thread of its own: a flight recorder that blocks on a hung GPU must not keep
the reader from hearing beats. After done, the end of the connection is the
rank's own: the reader calls no orphan.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import threading
import time
from typing import Any, Callable

from bench.core import conversation as talk
from bench.core.conversation.lines import Bad, Lines, TooLong, parse, proof

# This process's phone, once bootstrap dialled (bench.worker.barrier and the progress writers use it).
CURRENT: Phone | None = None
Reply = Callable[[str, Callable[[dict[str, Any]], bool]], None]
_PAYLOAD = ("report", "answer", "progress")


def _line(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg) + "\n").encode()


class Refused(OSError):
    """bench would not take this rank's hello (its rank said hello already)."""


def _first_line(sock: socket.socket) -> dict[str, Any]:
    """bench's first line on a new connection (its welcome, or why not); {} when it closes first."""
    got = b""
    while b"\n" not in got and len(got) < talk.MAX_HELLO:
        data = sock.recv(4096)
        if not data:
            return {}
        got += data
    try:
        msg = parse(got.split(b"\n", 1)[0])
    except Bad:
        return {}
    return msg


def fit(msg: dict[str, Any], limit: int = talk.MAX_LINE) -> bytes:
    """msg as one line of at most `limit` bytes: past it, its payload keeps only its scalar fields (strings cut to
    4 KiB) and says so; past that, only the message's own scalar fields. bench drops a longer line, and the rank
    with it."""
    data = _line(msg)
    if len(data) <= limit:
        return data
    note = f"cut: {len(data)} bytes over bench's limit of {limit}"
    scalars = {k: v for k, v in msg.items() if k not in _PAYLOAD and isinstance(v, (str, int, float, bool))}
    cut = dict(scalars)
    for key in _PAYLOAD:
        if isinstance(msg.get(key), dict):
            cut[key] = {k: v[:4096] if isinstance(v, str) else v for k, v in msg[key].items()
                        if v is None or isinstance(v, (str, int, float, bool))} | {"cut": note}
    data = _line(cut)
    return data if len(data) <= limit else _line({**{k: v for k, v in scalars.items() if len(str(v)) < 256},
                                                  **{k: {"cut": note} for k in _PAYLOAD if k in msg}})


class Phone:
    def __init__(self, sock: socket.socket, where: str):
        self.sock, self.where = sock, where
        self._lock = threading.Lock()
        self._go: dict[str, str] = {}
        self._cv = threading.Condition()
        self.last_beat = time.monotonic()
        self._reader: threading.Thread | None = None
        self._answering: threading.Thread | None = None
        self._broken: str | None = None   # why this end broke the connection (a send that failed or was cut)
        self._done = threading.Event()    # this rank said how it ended: the connection's end is its own
        self._over = threading.Event()    # the connection ended

    @classmethod
    def dial(cls, run_dir: str, rank: int, host: str, wait_s: float = talk.DIAL_S) -> Phone | None:
        """Connect to the launch's hub, say hello and wait for bench's welcome; None when the run has no hub.json
        (no bench behind it). A connection closed before the welcome (bench closes the oldest strangers when
        flooded) is dialled again until the launch's start timeout (hub.json's start_s) where that is longer than
        wait_s: a flood delays a launch, never ends it. Raises OSError (naming bench's address) when bench cannot
        be reached within wait_s, or refused the hello."""
        try:
            with open(os.path.join(run_dir, talk.NAME)) as f:
                hub = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise OSError(f"cannot read {os.path.join(run_dir, talk.NAME)}: {e}") from None
        where = f"[{hub['addr']}]:{hub['port']}" if ":" in str(hub["addr"]) else f"{hub['addr']}:{hub['port']}"
        deadline = time.monotonic() + wait_s
        start_s = hub.get("start_s")  # the launch's start timeout: a flood that closes this rank's connections
        start_s = float(start_s) if type(start_s) in (int, float) and 0 < start_s < 1e6 else 0.0  # delays it only
        flooded = time.monotonic() + max(wait_s, start_s)
        while True:
            reached = False  # bench took the connection: closed or reset before the welcome, it was a flood's
            try:
                sock = socket.create_connection((hub["addr"], int(hub["port"])), timeout=5)
                reached = True
                try:
                    sock.settimeout(max(0.5, min(talk.HELLO_S, flooded - time.monotonic())))
                    greeting = _first_line(sock)  # the hub's nonce: the hello proves the token, never sends it
                    nonce = greeting.get("nonce") if greeting.get("op") == "hub" else None
                    answer = {}
                    if isinstance(nonce, str):
                        sock.sendall(_line({"op": "hello", "proof": proof(str(hub["token"]), nonce[:64]), "rank": rank,
                                            "host": host, "pid": os.getpid()}))
                        answer = _first_line(sock)
                except BaseException:
                    sock.close()
                    raise
                if answer.get("op") == "welcome":
                    break
                sock.close()
                if answer.get("op") == "refused":
                    raise Refused(f"bench at {where} refused this rank: {str(answer.get('why'))[:200]}")
                why = "it closed the connection before its welcome"
            except Refused:
                raise
            except OSError as e:
                why = e.strerror or str(e)
            if time.monotonic() > (flooded if reached else deadline):
                tried = max(wait_s, start_s) if reached else wait_s
                raise OSError(f"cannot reach bench at {where} from {host} for {tried:.0f} s: {why} (the nodes must "
                              "reach the host bench runs on over TCP)") from None
            time.sleep(0.5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(talk.SEND_S)  # the sends' bound; the reader waits in poll, never in this timeout
        return cls(sock, where)

    def _say(self, msg: dict[str, Any]) -> bool:
        data = fit(msg)
        with self._lock:
            if self._broken is not None:
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError as e:
                self._broken = (f"a send to bench at {self.where} did not complete within {talk.SEND_S:.0f} s; the "
                                "connection is broken (part of a line may have gone)" if isinstance(e, TimeoutError)
                                else f"a send to bench at {self.where} failed: {e.strerror or e}")
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)  # the reader wakes and says why
                return False

    def listen(self, on_orphan: Callable[[str], None], on_request: Reply | None,
               orphan_after_s: float = talk.ORPHAN_AFTER_S) -> threading.Thread:
        """The reader thread: records beats and barrier releases, starts an answer to each stack request
        (on_request(id, send): send(answer) as often as the answer grows), and calls on_orphan(why) once when the
        connection closes or no beat came for orphan_after_s (never after done)."""

        def end(why: str) -> None:
            self._over.set()
            if not self._done.is_set():
                on_orphan(self._broken or why)

        def loop() -> None:
            lines, poller = Lines(talk.MAX_LINE), select.poll()
            poller.register(self.sock, select.POLLIN)
            while True:
                data = b""
                if poller.poll(1000):
                    try:
                        data = self.sock.recv(65536)
                    except OSError as e:
                        return end(f"the connection to bench at {self.where} broke: {e.strerror or e}")
                    if not data:
                        return end(f"bench at {self.where} closed the connection (the bench process that started "
                                   "this run is gone)")
                try:
                    for one in lines.feed(data):
                        with contextlib.suppress(Bad):
                            self._heard(parse(one), on_request)
                except TooLong as e:
                    return end(f"bench at {self.where} sent {e}")
                silent = time.monotonic() - self.last_beat
                if silent > orphan_after_s:
                    return end(f"no beat from bench at {self.where} for {silent:.0f} s")

        self._reader = threading.Thread(target=loop, name="bench-phone", daemon=True)
        self._reader.start()
        return self._reader

    def _heard(self, msg: dict[str, Any], on_request: Reply | None) -> None:
        op = msg["op"]
        if op == "beat":
            self.last_beat = time.monotonic()
        elif op == "go":
            with self._cv:
                self._go[str(msg.get("barrier"))] = str(msg.get("why"))
                self._cv.notify_all()
        elif op == "stacks?" and on_request is not None:
            request = str(msg.get("request"))[:64]
            if self._answering is None or not self._answering.is_alive():  # one answer at a time
                def send(answer: dict[str, Any]) -> bool:
                    return self._say({"op": "stacks", "request": request, "answer": answer})

                self._answering = threading.Thread(target=on_request, args=(request, send), name="bench-answer",
                                                   daemon=True)
                self._answering.start()

    def started(self) -> bool:
        return self._say({"op": "started", "at": time.time()})

    def progress(self, progress: dict[str, Any]) -> bool:
        return self._say({"op": "progress", "progress": progress})

    def enter(self, barrier: str, timeout_s: float, per_rank: bool) -> tuple[float, str | None]:
        """Wait at a start barrier (bench's plan says how many ranks it waits for); (seconds waited, why it was
        released, None when timeout_s ran out)."""
        if self._reader is None:  # a phone nobody listens on (no guard asked for): read for the barrier only
            self.listen(lambda why: None, None, orphan_after_s=float("inf"))
        t0 = time.monotonic()
        self._say({"op": "enter", "barrier": barrier, "per_rank": per_rank})
        with self._cv:
            self._cv.wait_for(lambda: barrier in self._go, timeout_s)
            return time.monotonic() - t0, self._go.get(barrier)

    def done(self, status: str, report: dict[str, Any] | None = None) -> bool:
        """Tell bench how this rank ended, half-close, and wait up to DONE_ACK_S for bench to close in turn: it reads
        the done before the end that follows it, so a rank that exits next cannot reset the connection before bench
        has its done (no ack message: at 8,000 ranks one send each cost the hub 0.1 s). Whether bench closed."""
        self._done.set()
        if not self._say({"op": "done", "status": status, "report": report}):
            return False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
        if self._reader is None:  # nobody reads: wait for bench's close here
            self.listen(lambda why: None, None, orphan_after_s=float("inf"))
        return self._over.wait(talk.DONE_ACK_S)
