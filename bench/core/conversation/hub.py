"""bench's end of the conversation (bench.core.conversation): a TCP server on one thread, one per launch."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.core import conversation as talk
from bench.core.results import write_json_atomic



@dataclass
class RankState:
    host: str
    pid: int
    hello_at: float
    started_at: float | None = None
    status: str | None = None            # ok, failed, oom (its done); "lost": the connection closed before it
    report: dict[str, Any] | None = None  # a failed rank's report (the same as its ranks/rank<R>.json)
    answers: dict[str, Any] = field(default_factory=dict)  # stack request id -> answer


@dataclass
class _Barrier:
    count: int
    per_rank: bool
    entered: set[int] = field(default_factory=set)
    ended_in: int = 0  # entered ranks that have since ended (kept as ranks end: no rescan of every rank per look)
    waiting: list[socket.socket] = field(default_factory=list)
    released: str | None = None


def _route_to(host: str) -> str:
    """This machine's address on the way to host (where the ranks reach bench); loopback for a local launch."""
    try:
        addr = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        if addr.startswith("127."):
            return "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # no packet is sent: the kernel picks the source address of the route
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


class Hub:
    """bench's end: every rank of one launch connects here."""

    def __init__(self, run_dir: str, addr: str, beat_s: float = talk.BEAT_S):
        self.run_dir, self.beat_s = run_dir, beat_s
        self.token = secrets.token_hex(16)
        self.listener = socket.create_server((addr, 0), backlog=4096)
        self.addr, self.port = addr, self.listener.getsockname()[1]
        self.ranks: dict[int, RankState] = {}
        self._ended: set[int] = set()  # ranks that said done, or whose connection closed first
        self.last_hello = time.monotonic()
        self.settled_at: int | None = None  # how many ranks had said hello when the launch settled
        self.progress: dict[str, Any] | None = None
        self._barriers: dict[str, _Barrier] = {}
        self._conns: dict[socket.socket, list] = {}  # -> [inbuf, outbuf, rank]
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)  # a full wake-up pipe already wakes the loop: never block on it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-hub", daemon=True)

    @classmethod
    @contextlib.contextmanager
    def open(cls, run_dir: str, toward: str = "127.0.0.1", beat_s: float = talk.BEAT_S):
        hub = cls(run_dir, _route_to(toward), beat_s)
        # Written once, before any rank starts: no client has looked its name up yet, so no cache says it is missing.
        write_json_atomic(os.path.join(run_dir, talk.NAME), {"addr": hub.addr, "port": hub.port, "token": hub.token})
        hub._thread.start()
        try:
            yield hub
        finally:
            hub.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(5)
        for s in (*self._conns, self.listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    # -- what bench asks, from its own thread --------------------------------------------------------------------

    def snapshot(self) -> dict[int, RankState]:
        with self._cv:
            return dict(self.ranks)

    def done_count(self) -> int:
        """How many ranks told bench they ended well."""
        with self._cv:
            return sum(1 for s in self.ranks.values() if s.status == "ok")

    def ask(self, ranks: list[int], wait_s: float) -> tuple[str, dict[int, Any]]:
        """Send a stack request to these ranks; (its id, the answers that came within wait_s)."""
        request = f"{time.time():.6f}-{os.getpid()}"
        with self._cv:
            conns = {st[2]: c for c, st in list(self._conns.items()) if st[2] in ranks}
        for c in conns.values():
            self._send(c, {"op": "stacks?", "request": request})
        deadline = time.monotonic() + wait_s
        with self._cv:
            while True:
                got = {r: self.ranks[r].answers[request] for r in conns if request in self.ranks[r].answers}
                left = deadline - time.monotonic()
                if len(got) == len(conns) or left <= 0:
                    return request, got
                self._cv.wait(min(left, 0.5))

    # -- the hub's thread -----------------------------------------------------------------------------------------

    def _send(self, conn: socket.socket, msg: dict[str, Any]) -> None:
        self._out.put((conn, (json.dumps(msg) + "\n").encode()))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _loop(self) -> None:
        self.listener.setblocking(False)
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        next_beat, beats, next_judge = time.monotonic(), 0, 0.0
        while not self._stop.is_set():
            for key, events in self._sel.select(timeout=0.5):
                s = key.fileobj
                if s is self.listener:
                    self._accept()
                elif s is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif events & selectors.EVENT_READ:
                    self._read(s)
                if events & selectors.EVENT_WRITE and s in self._conns:
                    self._flush(s)
            while not self._out.empty():
                conn, data = self._out.get()
                if conn in self._conns:
                    self._conns[conn][1] += data
                    self._flush(conn)
            now = time.monotonic()
            if now >= next_beat:
                beats += 1
                line = (json.dumps({"op": "beat", "n": beats}) + "\n").encode()
                for conn, state in list(self._conns.items()):
                    if state[2] is not None:
                        state[1] += line
                        self._flush(conn)
                next_beat = now + self.beat_s
            if now >= next_judge:  # the quiet rule's clock, and ranks that ended: a few times a second, not per message
                next_judge = now + 0.2
                with self._cv:
                    for name, b in self._barriers.items():
                        self._judge(name, b)

    def _ended_now(self, rank: int) -> None:
        if rank not in self._ended:
            self._ended.add(rank)
            for b in self._barriers.values():
                b.ended_in += rank in b.entered

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while True:
                conn, _ = self.listener.accept()
                conn.setblocking(False)
                with self._cv:  # bench's thread reads _conns (ask)
                    self._conns[conn] = [b"", b"", None]
                self._sel.register(conn, selectors.EVENT_READ)

    def _drop(self, conn: socket.socket) -> None:
        with self._cv:
            state = self._conns.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(conn)
        with contextlib.suppress(OSError):
            conn.close()
        if state and state[2] is not None:
            with self._cv:
                rs = self.ranks[state[2]]
                if rs.status is None:
                    rs.status = "lost"
                    self._ended_now(state[2])
                self._cv.notify_all()

    def _flush(self, conn: socket.socket) -> None:
        state = self._conns[conn]
        try:
            sent = conn.send(state[1]) if state[1] else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self._drop(conn)
            return
        state[1] = state[1][sent:]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.modify(conn, selectors.EVENT_READ | (selectors.EVENT_WRITE if state[1] else 0))

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        state = self._conns[conn]
        *lines, state[0] = (state[0] + data).split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                self._heard(conn, state, msg)

    def _heard(self, conn: socket.socket, state: list, msg: dict[str, Any]) -> None:
        op, rank = msg.get("op"), state[2]
        with self._cv:
            if op == "hello":
                if msg.get("token") != self.token or not isinstance(msg.get("rank"), int):
                    self._drop(conn)  # another launch's rank, or not a rank at all
                    return
                state[2] = rank = msg["rank"]
                self.ranks[rank] = RankState(str(msg.get("host")), int(msg.get("pid") or 0), time.time())
                self.last_hello = time.monotonic()
            elif rank is None:
                return
            elif op == "started":
                self.ranks[rank].started_at = float(msg.get("at") or time.time())
            elif op == "progress":
                self.progress = msg.get("progress")
            elif op == "stacks":
                self.ranks[rank].answers[str(msg.get("request"))] = msg.get("answer")
            elif op == "done":
                rs = self.ranks[rank]
                rs.status, rs.report = str(msg.get("status")), msg.get("report")
                self._ended_now(rank)
            elif op == "enter":
                name = str(msg.get("barrier"))
                b = self._barriers.setdefault(name, _Barrier(int(msg.get("count") or 0), bool(msg.get("per_rank"))))
                if (msg.get("per_rank") or rank == 0) and rank not in b.entered:
                    b.entered.add(rank)
                    b.ended_in += rank in self._ended
                if b.released:
                    self._send(conn, {"op": "go", "barrier": name, "why": b.released})
                else:
                    b.waiting.append(conn)
                    self._judge(name, b)
            self._cv.notify_all()

    def _judge(self, name: str, b: _Barrier) -> None:
        """Release barrier b when it is full, or (per rank) when every rank that started is in and no more come."""
        if b.released:
            return
        # Counts, not sets: at 8,000 ranks a look costs the same as at 8. Every entered rank said hello first.
        alive, alive_in = len(self.ranks) - len(self._ended), len(b.entered) - b.ended_in
        why = None
        if len(b.entered) + len(self._ended) - b.ended_in >= b.count:
            why = "all in"
        elif b.per_rank and b.entered and alive_in == alive:
            if self.settled_at == len(self.ranks):
                why = f"every rank that started is in ({len(self.ranks)} of {b.count}); the launch settled before"
            elif time.monotonic() - self.last_hello > talk.QUIET_S:
                self.settled_at = len(self.ranks)
                why = (f"{len(b.entered)} of {b.count} ranks in, every one that started; none started for "
                       f"{talk.QUIET_S:.0f} s: starting without the rest")
        if why:
            b.released = why
            for conn in b.waiting:
                self._send(conn, {"op": "go", "barrier": name, "why": why})
            b.waiting.clear()
