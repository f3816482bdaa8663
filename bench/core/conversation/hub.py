"""bench's end of the conversation (bench.core.conversation): a TCP server on one thread, one per launch.

    with Hub.open(run_dir, toward=[master_addr, *hosts], world=8) as hub: ...

Only a rank speaks for itself: a connection is a stranger (bench.core.conversation.wire) until its first line
is a hello that proves the launch's token (HMAC-SHA256 of the nonce the hub greeted that connection with, under
the token, compared in constant time: seeing a hello gives nothing) and a rank in 0..world-1 that has not said hello
before; from then on it speaks for that rank alone (started, progress, done, barriers, stack answers), and every
field is checked for its type and range before use. A message that breaks a rule drops its connection alone.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from bench.core import conversation as talk
from bench.core.conversation import words
from bench.core.conversation.barriers import Barriers, Refused
from bench.core.conversation.lines import Bad, number, proof, text, whole
from bench.core.conversation.route import reach_from
from bench.core.conversation.wire import Conn, Wire, escape, line
from bench.core.results import write_json_atomic

_WELCOME = line({"op": "welcome"})
_STATUSES = ("ok", "failed", "oom")


@dataclass
class RankState:
    host: str
    pid: int
    hello_at: float
    started_at: float | None = None
    status: str | None = None            # ok, failed, oom (its done); "lost": the connection closed before it
    report: dict[str, Any] | None = None  # a failed rank's report (the same as its ranks/rank<R>.json)
    answers: dict[str, Any] = field(default_factory=dict)  # stack request id -> answer
    peer: str = ""                        # the address its hello came from
    progress: dict[str, Any] | None = None  # its latest progress (bench.core.conversation.words.progress)
    progress_at: float | None = None      # when it came (time.time()): the watchdog's liveness of this rank
    garbled: str | None = None            # the first word of its that was not one a rank sends about itself
    kept: int = 0                         # bytes of JSON its report and answers hold (words.KEPT_MAX)


class Hub(Wire):
    """bench's end: every rank of one launch connects here. A context manager: closes on leaving."""

    def __init__(self, run_dir: str, addr: str, world: int, beat_s: float = talk.BEAT_S,
                 barriers: dict[str, bool] | None = None):
        if world < 1:
            raise ValueError(f"a launch of {world} ranks")
        super().__init__(run_dir, addr)
        self.world, self.beat_s = world, beat_s
        self.token = secrets.token_hex(16)
        self.ranks: dict[int, RankState] = {}
        self.last_hello = time.monotonic()
        self.progress: dict[str, Any] | None = None
        self.barriers = Barriers(world, barriers)
        self._by_rank: dict[int, Conn] = {}
        self._asked: set[str] = set()
        self._refused: dict[int, int] = {}  # rank -> barriers it entered that it could not
        self._beats, self._next_beat, self._next_judge = 0, 0.0, 0.0

    @classmethod
    def open(cls, run_dir: str, toward: str | Sequence[str] = "127.0.0.1", world: int = 1,
             beat_s: float = talk.BEAT_S, barriers: dict[str, bool] | None = None, start_s: float = 0.0) -> Hub:
        """Listen where the ranks on the hosts `toward` reach this machine (master address first), write hub.json
        (0600: the token is the user's who runs bench), start the thread. barriers: the launch's, from its plan
(bench.core.conversation.planned), the only ones its ranks may enter. start_s: its start timeout, how long a
rank whose connection a flood closes dials again (Phone.dial). OSError: it could not listen;
        StorageFailed: hub.json could not be written. Nothing is left open either way."""
        hub = cls(run_dir, reach_from([toward] if isinstance(toward, str) else toward), world, beat_s, barriers)
        try:
            # Written once, before any rank starts: no client has looked its name up yet, so no cache says missing.
            write_json_atomic(os.path.join(run_dir, talk.NAME), {"addr": hub.addr, "port": hub.port,
                                                                 "token": hub.token, "start_s": start_s}, mode=0o600)
            hub._note(f"{hub.addr}:{hub.port}", f"listening for {world} rank(s)")
            hub._thread.start()
        except BaseException:
            hub.close()
            raise
        return hub

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what bench asks, from its own thread --------------------------------------------------------------------

    @property
    def settled_at(self) -> int | None:
        """How many ranks had said hello when the launch settled (its barriers stopped waiting for the rest)."""
        return self.barriers.settled_at

    def snapshot(self) -> dict[int, RankState]:
        with self._cv:
            return dict(self.ranks)

    def done_count(self) -> int:
        """How many ranks told bench they ended well."""
        with self._cv:
            return sum(1 for s in self.ranks.values() if s.status == "ok")

    def oldest_progress(self) -> float | None:
        """The watchdog's liveness (bench.launch.execute): of the ranks still running that told bench their
        progress, when the one heard from longest ago last did (time.time()); None before any did. One rank's
        progress never hides another's hang."""
        with self._cv:
            times = [s.progress_at for s in self.ranks.values() if s.status is None and s.progress_at is not None]
        return min(times) if times else None

    def ask(self, ranks: list[int], wait_s: float) -> tuple[str, dict[int, Any]]:
        """Send a stack request to these ranks; (its id, the answers that came within wait_s)."""
        request = f"{time.time():.6f}-{os.getpid()}"
        with self._cv:
            self._asked.add(request)
            conns = {r: c for r in ranks if (c := self._by_rank.get(r)) is not None}
        for c in conns.values():
            self._send(c, {"op": "stacks?", "request": request})
        return request, self._answers(request, list(conns), lambda got: len(got) == len(conns), wait_s)

    def follow_up(self, request: str, ranks: list[int], done: Callable[[Any], bool],
                  wait_s: float) -> dict[int, Any]:
        """The latest answers of these ranks to `request`, once done(answer) holds for each, or after wait_s
        (a rank answers twice: its stacks at once, then again with its flight record)."""
        return self._answers(request, ranks, lambda got: all(done(a) for a in got.values()), wait_s)

    def _answers(self, request: str, ranks: list[int], enough: Callable[[dict[int, Any]], bool],
                 wait_s: float) -> dict[int, Any]:
        """These ranks' latest answers to `request`, once enough(them) holds or wait_s has passed."""
        deadline = time.monotonic() + wait_s
        with self._cv:
            while True:
                got = {r: self.ranks[r].answers[request] for r in ranks if request in self.ranks[r].answers}
                left = deadline - time.monotonic()
                if enough(got) or left <= 0:
                    return got
                self._cv.wait(min(left, 0.5))

    # -- the hub's thread -----------------------------------------------------------------------------------------

    def _greet(self, c: Conn) -> None:
        self._push(c, line({"op": "hub", "nonce": c.nonce}))

    def _periodic(self, now: float) -> None:
        if now >= self._next_beat:
            self._beats += 1
            self._next_beat = now + self.beat_s
            beat = line({"op": "beat", "n": self._beats})
            for c in list(self._by_rank.values()):
                if not c.out:  # a beat still waiting for a rank that does not read is as good as two
                    self._push(c, beat)
        if now >= self._next_judge:  # the quiet rule's clock, and ranks that ended: a few times a second
            self._next_judge = now + 0.2
            with self._cv:
                self._release(self.barriers.judge(len(self.ranks), self.last_hello))

    def _release(self, released: list[tuple[str, str, list[Conn]]]) -> None:
        for name, why, conns in released:
            go = line({"op": "go", "barrier": name, "why": why})
            for c in conns:
                self._push(c, go)

    def _lost(self, c: Conn, why: str | None) -> str | None:
        assert c.rank is not None
        if self._by_rank.get(c.rank) is c:
            del self._by_rank[c.rank]
        rs = self.ranks[c.rank]
        if rs.status is None:
            rs.status = "lost"
            self.barriers.ended_now(c.rank)
            return why or "closed before it said done"
        return why

    def _heard(self, c: Conn, msg: dict[str, Any]) -> None:
        op, rank = msg["op"], c.rank
        if rank is None:
            if op != "hello":
                raise Bad(f"{op[:40]!r} before hello")
            return self._hello(c, msg)
        with self._cv:
            if op == "started":
                self.ranks[rank].started_at = number(msg, "at")
            elif op == "progress":
                self._progress(c, rank, msg.get("progress"))
            elif op == "stacks":
                request = text(msg, "request", 64)
                if request in self._asked:
                    self._answer(c, rank, request, msg.get("answer"))
            elif op == "done":
                self._done(c, rank, msg)
            elif op == "enter":
                self._enter(c, rank, text(msg, "barrier", talk.MAX_NAME), msg.get("per_rank"))
            else:
                raise Bad(f"unknown op {op[:40]!r}")
            self._cv.notify_all()

    def _hello(self, c: Conn, msg: dict[str, Any]) -> None:
        said = msg.get("proof")  # HMAC(token, this connection's nonce): the token itself never crosses the network
        if not isinstance(said, str) or not hmac.compare_digest(said.encode(), proof(self.token, c.nonce).encode()):
            raise Bad("a hello without this launch's proof (HMAC of the hub's nonce under its token)")
        c.known = True
        rank = whole(msg, "rank", 0, self.world - 1)
        host, pid = text(msg, "host", 255), whole(msg, "pid", 0, 2 ** 31 - 1)
        if escape(host) != host:  # a host name has none: ranks.json and hub.log take the hello's host as it is
            raise Bad(f"hello: host {escape(host)[:80]!r} has control characters")
        with self._cv:
            if (was := self.ranks.get(rank)) is not None:
                self._note(c.peer, f"refused: a second hello for rank {rank} (it said hello from {was.peer}, "
                                   f"pid {was.pid} on {was.host})")
                self._push(c, line({"op": "refused", "why": f"rank {rank} already said hello"}))
                return self._drop(c, None)
            self._pending.remove(c)
            c.rank, c.lines.limit = rank, talk.MAX_LINE
            self.ranks[rank] = RankState(host, pid, time.time(), peer=c.peer)
            self._by_rank[rank] = c
            self.last_hello = time.monotonic()
            self._push(c, _WELCOME)  # the rank dials again until it has this (phone.dial)
            self._cv.notify_all()

    def _garbled(self, c: Conn, rs: RankState, what: str) -> None:
        """A word of c's rank that is not one a rank sends about itself: the rank's, in the log and its record."""
        self._note(c.peer, f"rank {c.rank}: {what}")
        if rs.garbled is None:
            rs.garbled = what

    def _keep(self, c: Conn, rs: RankState, value: Any, was: Any = None) -> bool:
        """Account for value kept for rs (in place of was); False (and c dropped) past words.KEPT_MAX."""
        size = len(line(value)) - (len(line(was)) if was is not None else 0)
        if rs.kept + size > words.KEPT_MAX:
            self._drop(c, f"dropped: what bench keeps of its words would pass {words.KEPT_MAX} bytes")
            return False
        rs.kept += size
        return True

    def _progress(self, c: Conn, rank: int, raw: Any) -> None:
        rs = self.ranks[rank]
        try:
            rs.progress = words.progress(raw)  # flat and small: replaced, never accumulated
        except Bad as e:
            return self._garbled(c, rs, f"a progress that is not one a rank sends ({e}), ignored")
        rs.progress_at = time.time()
        self.progress = rs.progress

    def _answer(self, c: Conn, rank: int, request: str, raw: Any) -> None:
        rs = self.ranks[rank]
        got, garbled = words.answer(raw, rank, rs.host, request)
        if garbled is not None:
            self._garbled(c, rs, garbled)
        if self._keep(c, rs, got, rs.answers.get(request)):
            rs.answers[request] = got

    def _done(self, c: Conn, rank: int, msg: dict[str, Any]) -> None:
        status, raw = msg.get("status"), msg.get("report")
        if status not in _STATUSES:
            raise Bad(f"done: status {str(status)[:20]!r} is not one a rank sends")
        rs = self.ranks[rank]
        if rs.status is None:
            report, garbled = words.report(raw, rank, rs.host, status)
            if garbled is not None:
                self._garbled(c, rs, garbled)
            rs.status = status
            if report is not None and self._keep(c, rs, report):
                rs.report = report
            self.barriers.ended_now(rank)
        else:
            self._note(c.peer, f"rank {rank}: a second done ({status}), ignored")

    def _enter(self, c: Conn, rank: int, name: str, per_rank: Any) -> None:
        if not isinstance(per_rank, bool):
            raise Bad("enter: per_rank is not a boolean")
        try:  # per_rank is the rank's guess: the count and who counts are bench's plan
            why = self.barriers.enter(name, rank, c)
        except Refused as e:  # for this rank alone: it starts without waiting, and nothing else changes
            if (n := self._refused.get(rank, 0)) < 4 or n % 1000 == 0:  # a rank's junk must not fill the log
                self._note(c.peer, f"rank {rank}: refused: {e}" + (f" ({n} before)" if n else ""))
            self._refused[rank] = n + 1
            return self._push(c, line({"op": "go", "barrier": name, "why": f"refused: {e}"}))
        if why is not None:
            self._push(c, line({"op": "go", "barrier": name, "why": why}))
        else:
            self._release(self.barriers.judge(len(self.ranks), self.last_hello, only=name))
