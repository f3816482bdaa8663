"""bench's hub (bench.core.conversation) at thousands of ranks: how long hellos, a start barrier and the ends take.

    .venv/bin/python benchmarks/hub_scale.py --ranks 1000,4000,8000      # ~1 min on 2 cores

One process plays every rank with raw non-blocking sockets (what a rank's phone sends: hello, in answer to the
hub's greeting, 64 connections awaiting theirs at once; enter; done), so the
figures are the hub's: from the first connect until every rank said hello (accepted and heard), from the first
enter until every rank heard "go", and from the first done until the hub counted every rank done (the sending
overlaps the hub's work, as thousands of ranks' would). The hub runs in this process's
thread as in bench's. What it cannot say: a real network's latency, thousands of processes' start-up, the
kernel's accept queue under a real storm (both ends share this machine's two cores here).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.core.conversation.hub import Hub  # noqa: E402
from bench.core.conversation.lines import proof  # noqa: E402


def _say(sock: socket.socket, msg: dict) -> None:
    sock.setblocking(True)
    sock.sendall((json.dumps(msg) + "\n").encode())
    sock.setblocking(False)


def _cpu_s(tid: int | None) -> float:
    """CPU seconds a thread of this process used (user and system): the hub's own cost, whatever else ran."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _hellos(n: int, doc: dict, window: int = 64) -> list[socket.socket]:
    """Every rank connects and answers the hub's greeting (its nonce) with its hello (HMAC of it under the token), at
    most `window` waiting for their greeting at once (thousands of ranks dial in parallel; one process overlaps them
    so, under the hub's per-address cap)."""
    sel, waiting, socks, r = selectors.DefaultSelector(), 0, [], 0
    while r < n or waiting:
        while r < n and waiting < window:
            s = socket.create_connection((doc["addr"], doc["port"]))
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, [r, b""])
            r, waiting = r + 1, waiting + 1
        for key, _ in sel.select(timeout=5):
            key.data[1] += key.fileobj.recv(4096)
            if not key.data[1].endswith(b"\n"):
                continue
            sel.unregister(key.fileobj)
            waiting -= 1
            nonce = json.loads(key.data[1])["nonce"]
            rank = key.data[0]
            _say(key.fileobj, {"op": "hello", "proof": proof(doc["token"], nonce), "rank": rank,
                               "host": f"node{rank // 8}", "pid": rank})
            socks.append(key.fileobj)
    return sorted(socks, key=lambda s: s.fileno())


def one(n: int) -> dict:
    with tempfile.TemporaryDirectory() as d, Hub.open(d, world=n) as hub:
        doc = json.load(open(os.path.join(d, "hub.json")))
        t0 = time.monotonic()
        socks = _hellos(n, doc)
        while len(hub.snapshot()) < n:
            time.sleep(0.01)
        hellos = time.monotonic() - t0
        t1 = time.monotonic()  # from the first enter: the hub works while the last ones are still being sent
        for r, s in enumerate(socks):
            _say(s, {"op": "enter", "barrier": "steps", "per_rank": True})
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        gone = set()
        while len(gone) < n:
            for key, _ in sel.select(timeout=5):
                data = key.fileobj.recv(65536)
                if b'"go"' in data:
                    gone.add(key.fileobj)
                    sel.unregister(key.fileobj)
        released = time.monotonic() - t1
        t2 = time.monotonic()
        for s in socks:
            _say(s, {"op": "done", "status": "ok", "report": None})
        while hub.done_count() < n:
            time.sleep(0.01)
        done = time.monotonic() - t2
        cpu = _cpu_s(hub._thread.native_id)
        for s in socks:
            s.close()
    return {"ranks": n, "hellos_s": round(hellos, 3), "barrier_released_s": round(released, 3),
            "all_done_s": round(done, 3), "hub_cpu_s": round(cpu, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="1000,4000,8000")
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * max(int(x) for x in a.ranks.split(",")) + 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))
    print(f"load average {os.getloadavg()[0]:.2f}")
    for n in (int(x) for x in a.ranks.split(",")):
        print(json.dumps(one(n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
