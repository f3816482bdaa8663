"""A hostile client of bench's hub (bench.core.conversation), the test's own code: what anyone who can reach the
port can send, and what someone who read the launch's token can.

    seen = without_token(addr, port, idle=2000)     # each attack on a connection of its own, then idle ones held
    seen = with_token(addr, port, token, world, until=event)   # forged hellos, dones, barriers; progress every 0.1 s

run_dir/hub.json is 0600: a test reads it as root, as another user of a cluster cannot. Each attack says what the
hub did with its connection: "closed" (it hung up on it), "open" (still held), "refused: <why>" (its answer).
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import socket
import threading
import time

ATTACKS = {
    "nested": b"[" * 100_000 + b"\n",        # json.loads: RecursionError
    "newlines": b"\n" * (64 << 10),
    "not json": bytes(range(256)) * 16 + b"\n",  # not UTF-8 either
}
LONG = 64 << 20                               # a line without its newline
HELLO_WAIT_S = 10.0                           # bench.core.conversation.HELLO_S, as the hub's users know it


def hub_of(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "hub.json")) as f:
        return json.load(f)


def _connect(addr: str, port: int) -> socket.socket:
    return socket.create_connection((addr, port), timeout=10)


def _answer(s: socket.socket, wait_s: float) -> str:
    """What the hub does with this connection within wait_s: "refused: ..." (its last word), "closed" or "open"."""
    s.settimeout(wait_s)
    got = b""
    try:
        while data := s.recv(65536):
            got += data
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return "open"
    for line in got.splitlines():
        msg = json.loads(line)
        if msg.get("op") == "refused":
            return f"refused: {msg.get('why')}"
    return "closed"


def _long_line(addr: str, port: int) -> str:
    s = _connect(addr, port)
    chunk, sent = b"x" * (1 << 20), 0
    try:
        while sent < LONG:
            s.sendall(chunk)
            sent += len(chunk)
    except (ConnectionResetError, BrokenPipeError, TimeoutError) as e:
        return f"closed after {sent >> 20} MiB sent ({type(e).__name__})"
    finally:
        s.close()
    return f"took all {LONG >> 20} MiB"


def idle_room() -> int:
    """How many connections this process can hold: its open-files limit, less a margin for everything else."""
    return max(0, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 256)


def _hold(addr: str, port: int, n: int, wait_s: float) -> dict:
    socks, sel = [], selectors.DefaultSelector()
    for _ in range(n):
        s = _connect(addr, port)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    closed, deadline = set(), time.monotonic() + wait_s
    while len(closed) < n and (left := deadline - time.monotonic()) > 0:
        for key, _ in sel.select(timeout=min(left, 0.5)):
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if not data:
                closed.add(key.fileobj)
                sel.unregister(key.fileobj)
    for s in socks:
        s.close()
    return {"held": n, "closed_by_hub": len(closed)}


def without_token(addr: str, port: int, idle: int = 2000, wait_s: float = HELLO_WAIT_S + 10) -> dict:
    """Every attack of a stranger, one after another; the idle ones last (as many as this process may hold)."""
    seen: dict = {"from": set()}
    for name, data in ATTACKS.items():
        s = _connect(addr, port)
        seen["from"].add(s.getsockname()[0])
        try:
            s.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            pass
        seen[name] = _answer(s, 10)
        s.close()
    seen["long line"] = _long_line(addr, port)
    seen["idle"] = _hold(addr, port, min(idle, idle_room()), wait_s)
    return seen


def _lines(*msgs: dict) -> bytes:
    return b"".join((json.dumps(m) + "\n").encode() for m in msgs)


def greeting(s: socket.socket) -> str:
    """The hub's first line on a new connection: its nonce for this connection's hello."""
    got = b""
    while b"\n" not in got:
        data = s.recv(1)  # one byte at a time: nothing after the greeting is read here
        if not data:
            raise ConnectionError("the hub closed the connection before its greeting")
        got += data
    return json.loads(got)["nonce"]


def proved(data: bytes, nonce: str) -> bytes:
    """data with each hello's "token" replaced by what a holder of it sends: its proof for this nonce (other lines,
    JSON or not, as they are)."""
    from bench.core.conversation.lines import proof
    out = []
    for line in data.split(b"\n"):
        try:
            msg = json.loads(line) if b'"hello"' in line else None
        except (ValueError, RecursionError):
            msg = None
        if isinstance(msg, dict) and msg.get("op") == "hello" and isinstance(msg.get("token"), str):
            msg["proof"] = proof(msg.pop("token"), nonce)
            line = json.dumps(msg).encode()
        out.append(line)
    return b"\n".join(out)


def as_rank(addr: str, port: int, token: str, rank: int, host: str, *msgs: dict) -> socket.socket:
    """A connection that said hello as `rank` on `host` (welcomed), then sent msgs: what any rank, or anyone who
    holds the token, can say."""
    s = _connect(addr, port)
    s.sendall(proved(_lines({"op": "hello", "token": token, "rank": rank, "host": host, "pid": 1}), greeting(s)))
    got = b""
    while b"\n" not in got:
        data = s.recv(4096)
        if not data:
            raise ConnectionError(f"the hub closed rank {rank}'s connection before its welcome")
        got += data
    assert json.loads(got.split(b"\n", 1)[0]).get("op") == "welcome", got
    if msgs:
        s.sendall(_lines(*msgs))
    return s


def with_token(addr: str, port: int, token: str, world: int, until: threading.Event, every_s: float = 0.1) -> dict:
    """A forger who read hub.json: a hello for every rank of the world and for ranks outside it, each followed by a
    done ok, a barrier of count 0 and a progress; then a progress every every_s until `until` is set."""
    def hello(rank: int) -> dict:
        return {"op": "hello", "token": token, "rank": rank, "host": "forger", "pid": 1}

    seen: dict = {}
    for rank in (*range(world), world, world + 7, -1):
        s = _connect(addr, port)
        s.sendall(proved(_lines(hello(rank), {"op": "done", "status": "ok", "report": None},
                         {"op": "enter", "barrier": "steps", "count": 0, "per_rank": True},
                         {"op": "progress", "progress": {"step": 10 ** 6, "time": time.time()}}), greeting(s)))
        seen[f"hello {rank}"] = _answer(s, 10)
        s.close()
    sent = 0
    while not until.wait(every_s):
        try:
            with _connect(addr, port) as s:
                s.sendall(proved(_lines(hello(sent % world), {"op": "progress", "progress": {
                    "step": 10 ** 6 + sent, "time": time.time()}}), greeting(s)))
            sent += 1
        except OSError:  # the launch ended: its hub is gone
            break
    seen["progress sent"] = sent
    return seen


def bench_pid(port: int) -> int | None:
    """The process that listens on the hub's port: bench."""
    import psutil

    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            return c.pid
    return None


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


class Stranger(threading.Thread):
    """without_token() at every launch whose hub.json matches `pattern` (a glob), once each, as it appears, until
    stop is set; bench's resident memory sampled every 0.1 s meanwhile. launches: per launch attacked, its run
    directory, what each attack saw, bench's VmRSS before and at most (KiB)."""

    def __init__(self, pattern: str, idle: int = 2000):
        super().__init__(name="hostile-stranger", daemon=True)
        self.pattern, self.idle = pattern, idle
        self.stop = threading.Event()
        self.launches: list[dict] = []

    def run(self) -> None:
        import glob

        tried: set[str] = set()
        while not self.stop.is_set():
            for path in sorted(set(glob.glob(self.pattern)) - tried):
                tried.add(path)
                try:
                    doc = hub_of(os.path.dirname(path))  # whole or absent: written to a temporary name, renamed
                except (OSError, ValueError):
                    continue
                if (pid := bench_pid(doc["port"])) is None:
                    continue  # that launch is over
                rss, sampled = [rss_kib(pid)], threading.Event()

                def sample() -> None:
                    while not sampled.wait(0.1):
                        rss.append(rss_kib(pid))

                threading.Thread(target=sample, daemon=True).start()
                try:
                    seen = without_token(doc["addr"], doc["port"], idle=self.idle)
                except OSError as e:  # the launch ended meanwhile
                    seen = {"error": f"{type(e).__name__}: {e}"}
                sampled.set()
                self.launches.append({"run_dir": os.path.dirname(path), "seen": seen, "rss_before_kib": rss[0],
                                      "rss_max_kib": max(rss)})
            self.stop.wait(0.1)


def changed_nothing(launch: dict) -> dict:
    """What a launch under Stranger must show: every stranger's connection closed by the hub, the long line cut
    within 16 MiB, every idle connection closed, bench's memory within 32 MiB of where it was (the line alone is 64),
    the hub's log naming the stranger's address, hub.json 0600. Returns the figures for the test's report."""
    seen = launch["seen"]
    assert "error" not in seen, launch
    assert {k: seen[k] for k in ATTACKS} == dict.fromkeys(ATTACKS, "closed"), seen
    assert seen["long line"].startswith("closed after") and int(seen["long line"].split()[2]) < 16, seen
    assert 0 < seen["idle"]["held"] == seen["idle"]["closed_by_hub"], seen
    grew = launch["rss_max_kib"] - launch["rss_before_kib"]
    assert grew < 32 << 10, launch
    with open(os.path.join(launch["run_dir"], "logs", "hub.log")) as f:
        log = f.read()
    assert all(f"{a}:" in log for a in seen["from"]) and "dropped: a line of over" in log, log[-3000:]
    assert os.stat(os.path.join(launch["run_dir"], "hub.json")).st_mode & 0o777 == 0o600
    return {"idle held": seen["idle"]["held"], "long line": seen["long line"], "rss_before_mib":
            round(launch["rss_before_kib"] / 1024, 1), "rss_grew_mib": round(grew / 1024, 1)}


def until(cond, s: float = 5.0) -> bool:
    """Whether cond() held within s seconds (polled every 20 ms): the hub tests' wait."""
    deadline = time.monotonic() + s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def hub_log(hub, run_dir, missing_ok: bool = False) -> str:
    """logs/hub.log after the hub flushed what it noted ("" where none was written and missing_ok)."""
    hub.flush_log()
    path = run_dir / "logs" / "hub.log"
    return "" if missing_ok and not path.exists() else path.read_text()
