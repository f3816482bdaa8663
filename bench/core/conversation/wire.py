"""The hub's sockets (bench.core.conversation): one thread, one selector, every connection a stranger at first.

    class Hub(Wire):                          # the protocol: _heard(c, msg), _lost(c, why), _periodic(now)
    w.trouble()                               # why the thread stopped serving, or None
    w.flush_log()                             # what it noted (peers dropped and why) -> run_dir/logs/hub.log

Every read and every message is handled inside a guard: whatever a peer's
bytes break, that connection alone is dropped and the drop is noted with
the peer's address. A connection is pending until its rank says hello: at
most MAX_PENDING at once (past it the oldest goes, as OpenSSH's MaxStartups
drops), each for at most HELLO_S, its line at most MAX_HELLO bytes. An
accept that fails for lack of descriptors closes the oldest pending
connection (one that said nothing for STRANGER_S), or pauses accepting for
ACCEPT_PAUSE_S (the kernel queues the connects meanwhile); it never ends
the thread. What waits to go to a peer is
at most MAX_OUT bytes, and the kernel's send buffer for it is fixed at
SNDBUF (never autotuned): a peer that stops reading is dropped, not buffered.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import queue
import secrets
import selectors
import socket
import threading
import time
import traceback
from collections import deque
from typing import Any

from bench.core import conversation as talk
from bench.core.conversation.lines import Bad, Lines, TooLong, parse
from bench.core.conversation.strangers import Strangers

_R, _W = selectors.EVENT_READ, selectors.EVENT_WRITE
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


# Control characters (C0, DEL, C1, the Unicode line and paragraph separators) as \\xNN / \\uNNNN in what is logged.
_ESCAPES = {i: f"\\x{i:02x}" for i in (*range(32), *range(127, 160))} | {0x2028: "\\u2028", 0x2029: "\\u2029"}


def escape(text: str) -> str:
    """text as one line of a log: every control character written as its escape."""
    return text.translate(_ESCAPES)


def line(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg) + "\n").encode()


class Conn:
    __slots__ = ("sock", "addr", "peer", "lines", "out", "rank", "since", "writing", "known", "nonce")

    def __init__(self, sock: socket.socket, peer: Any):
        self.sock, self.since, self.out, self.writing = sock, time.monotonic(), bytearray(), False
        self.rank: int | None = None
        self.known = False  # its hello proved the launch's token: its lines are not a stranger's
        self.nonce = secrets.token_hex(16)  # the hub's greeting: its hello answers HMAC(token, nonce)
        self.addr = str(peer[0])
        self.peer = f"[{self.addr}]:{peer[1]}" if ":" in self.addr else f"{self.addr}:{peer[1]}"
        self.lines = Lines(talk.MAX_HELLO)


class Wire:
    def __init__(self, run_dir: str, addr: str):
        self.run_dir = run_dir
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        try:
            self.listener = socket.create_server((addr, 0), family=fam, backlog=4096)
        except OSError as e:
            raise OSError(e.errno, f"cannot listen on {addr}: {os.strerror(e.errno) if e.errno else e}") from None
        try:
            self._wake_r, self._wake_w = socket.socketpair()
        except OSError:
            self.listener.close()
            raise
        self._wake_w.setblocking(False)  # a full wake-up pipe already wakes the loop: never block on it
        self.addr, self.port = addr, self.listener.getsockname()[1]
        self.stopped: str | None = None  # why the thread stopped (trouble)
        self._conns: dict[socket.socket, Conn] = {}
        self._pending = Strangers()
        self._paused_until = 0.0
        self._log: deque[str] = deque()
        self._noted = {False: 0, True: 0}  # lines noted: bench's own and the ranks', strangers'
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-hub", daemon=True)

    # -- the protocol's part (bench.core.conversation.hub) ------------------------------------------------------------

    def _heard(self, c: Conn, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    def _lost(self, c: Conn, why: str | None) -> str | None:
        """c, which said hello, is gone (under the lock); returns what to note."""
        return why

    def _periodic(self, now: float) -> None:
        """Beats and the barriers' clocks: after every round of the loop."""

    def _greet(self, c: Conn) -> None:
        """A new connection's first line from the hub (the protocol's: its nonce)."""

    # -- bench's thread ---------------------------------------------------------------------------------------------

    def trouble(self) -> str | None:
        """Why the thread stopped serving (bench ends the launch on it), or None while it serves."""
        if self.stopped is None and self._thread.ident is not None and not self._thread.is_alive() \
                and not self._stop.is_set():
            return "its thread ended"
        return self.stopped

    def flush_log(self) -> None:
        """Append what was noted since the last call to logs/hub.log: bench's thread does the disk's work."""
        lines = [self._log.popleft() for _ in range(len(self._log))]
        if lines:
            with contextlib.suppress(OSError), open(os.path.join(self.run_dir, "logs", "hub.log"), "a") as f:
                f.write("".join(x + "\n" for x in lines))

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(5)
        for s in (*self._conns, self.listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(OSError):
            self._sel.close()
        self.flush_log()

    def _send(self, c: Conn, msg: dict[str, Any]) -> None:
        """From bench's thread: the hub's thread sends it."""
        self._out.put((c, line(msg)))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # -- the thread -------------------------------------------------------------------------------------------------

    def _note(self, peer: str, what: str, stranger: bool = False) -> None:
        """A line for logs/hub.log, every control character escaped (a newline in a hello's host must not make a
        line of its own); past LOG_LINES of its kind only counted: strangers' lines have a budget of their own, so
        a flood of them can fill neither --out's disk nor the ranks' and bench's evidence."""
        self._noted[stranger] += 1
        n, kind = self._noted[stranger], "stranger" if stranger else "rank or bench"
        if n <= talk.LOG_LINES or n % talk.LOG_LINES == 0:
            more = f" ({n - talk.LOG_LINES} {kind} line(s) since not logged)" if n > talk.LOG_LINES else ""
            self._log.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {escape(peer)}: {escape(what)}{more}")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - named to bench (trouble) and in the log, never silent
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            self.stopped = f"{type(e).__name__}: {first}" if first else type(e).__name__
            self._note("hub", f"its thread stopped: {traceback.format_exc()}")

    def _loop(self) -> None:
        self.listener.setblocking(False)
        self._sel.register(self.listener, _R)
        self._sel.register(self._wake_r, _R)
        next_tick = 0.0
        while not self._stop.is_set():
            knocked = False
            for key, events in self._sel.select(timeout=0.5):
                c = key.data
                if c is None:
                    if key.fileobj is self.listener:
                        knocked = True  # after the reads: hellos already here are heard before new strangers come
                    else:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    continue
                try:
                    if events & _R:
                        self._read(c)
                    if events & _W and c.sock in self._conns:
                        self._flush(c)
                except Exception as e:  # noqa: BLE001 - whatever a peer's bytes broke, that peer alone goes
                    self._drop(c, f"dropped: {type(e).__name__}: {e}")
            if knocked:
                self._accept()
            while True:
                try:
                    c, data = self._out.get_nowait()
                except queue.Empty:
                    break
                self._push(c, data)
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + 0.2
                if self._paused_until and now >= self._paused_until:
                    self._paused_until = 0.0
                    self._sel.register(self.listener, _R)
                for c in self._pending.expired(now):
                    self._drop(c, f"closed: no hello within {talk.HELLO_S:.0f} s")
            self._periodic(now)

    def _accept(self) -> None:
        for _ in range(talk.ACCEPT_BATCH):  # then the reads: a storm of connects does not starve the hellos
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # gone before it was taken
                # No descriptor left (accept fails so even with nobody waiting): a stranger's is freed, never one
                # just taken, whose hello is on its way.
                stale = self._pending.stale(time.monotonic()) if e.errno in _OUT_OF_FILES else None
                if stale is not None:
                    self._drop(stale, f"closed: accept failed ({e.strerror}): the oldest connection without a "
                               "hello goes")
                    continue
                self._paused_until = time.monotonic() + talk.ACCEPT_PAUSE_S
                self._sel.unregister(self.listener)
                self._note("hub", f"accept failed ({e.strerror}): not accepting for {talk.ACCEPT_PAUSE_S} s")
                return
            sock.setblocking(False)
            # Fixed, not autotuned: MAX_OUT bounds bench's buffer, this the kernel's (conversation.SNDBUF).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, talk.SNDBUF)
            c = Conn(sock, peer)
            self._conns[sock] = c
            self._sel.register(sock, _R, c)
            if (gone := self._pending.add(c)) is not None:
                self._drop(gone[0], f"closed: connections without a hello, {gone[1]}: the oldest goes")
            self._greet(c)

    def _drop(self, c: Conn, why: str | None) -> None:
        if self._conns.pop(c.sock, None) is None:
            return
        self._pending.remove(c)
        if c.rank is not None:
            with self._cv:
                why = self._lost(c, why)
                self._cv.notify_all()
        if why:  # before the close: whoever sees it closed finds why in the log
            self._note(c.peer, f"rank {c.rank}: {why}" if c.rank is not None else why,
                       stranger=c.rank is None and not c.known)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(c.sock)
        with contextlib.suppress(OSError):
            c.sock.close()

    def _push(self, c: Conn, data: bytes) -> None:
        if c.sock not in self._conns:
            return
        if len(c.out) + len(data) > talk.MAX_OUT:
            return self._drop(c, f"dropped: stopped reading ({len(c.out)} bytes waiting for it)")
        c.out += data
        self._flush(c)

    def _flush(self, c: Conn) -> None:
        try:
            sent = c.sock.send(c.out) if c.out else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as e:
            return self._drop(c, f"dropped: send failed ({e.strerror})")
        del c.out[:sent]
        if c.writing != bool(c.out):  # epoll_ctl only when it changes: beats go to thousands of ranks
            c.writing = bool(c.out)
            self._sel.modify(c.sock, _R | (_W if c.writing else 0), c)

    def _read(self, c: Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            return self._drop(c, f"connection broke ({e.strerror})")
        if not data:
            return self._drop(c, None)
        try:
            for one in c.lines.feed(data):
                if c.sock not in self._conns:
                    return
                self._heard(c, parse(one))
        except (TooLong, Bad) as e:
            self._drop(c, f"dropped: {e}")
