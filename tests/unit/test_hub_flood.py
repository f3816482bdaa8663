"""The log keeps its evidence and a flood delays a launch, never ends it (issue 52): strangers' lines have a budget of
their own, every field of a log line is escaped, the pending cap closes the flooders' own connections, and a rank
whose connections a flood closes dials again until its launch's start timeout. Real loopback TCP, a real Hub; every
127/8 address is this machine, so each stands for another host."""

from __future__ import annotations

import functools
import json
import re
import socket
import threading
import time

import pytest

from bench.core import conversation
from bench.core.conversation.hub import Hub
from bench.core.conversation.phone import Phone
from tests import hostile


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "logs").mkdir()
    return tmp_path


_until = functools.partial(hostile.until, s=10.0)


_log = hostile.hub_log


def _from(addr: str, hub: Hub) -> socket.socket:
    s = socket.socket()
    s.bind((addr, 0))
    s.connect((hub.addr, hub.port))
    return s


def _closed(s: socket.socket, wait_s: float) -> bool:
    """Whether the hub closed s within wait_s (beats or not)."""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            if not s.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def test_a_newline_in_a_hello_s_host_forges_no_log_line_and_no_record(run_dir):
    # Before: the host went into hub.log as it came (a well-formed forged line) and into ranks.json.
    forged = "node0\n2026-12-06T10:00:00 10.0.0.99:40404: refused: a second hello for rank 0 from 10.0.0.42"
    with Hub.open(str(run_dir), world=1, beat_s=0.2) as hub:
        seen = []
        for _ in range(2):
            s = hostile._connect(hub.addr, hub.port)
            s.sendall(hostile.proved(hostile._lines({"op": "hello", "token": hub.token, "rank": 0, "host": forged,
                                                     "pid": 1}), hostile.greeting(s)))
            seen.append(_closed(s, 1.0))
            s.close()
        log = _log(hub, run_dir)
    assert seen == [True, True] and hub.snapshot() == {}
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \S+: ", x) for x in log.splitlines()), log
    assert "10.0.0.99:40404" not in "".join(x.split(": ", 1)[0] for x in log.splitlines())
    assert "has control characters" in log


def test_1000_newline_strangers_leave_the_ranks_evidence_in_the_log(run_dir):
    # Before: 1,000 strangers' newlines used the launch's one LOG_LINES budget; the forger, the refused rank and the
    # lost rank 0 were then missing from hub.log.
    with Hub.open(str(run_dir), world=2, beat_s=0.2) as hub:
        for batch in range(10):
            socks = [_from(f"127.0.1.{batch + 1}", hub) for _ in range(100)]
            for s in socks:
                s.sendall(b"\n")
            assert all(_closed(s, 5) for s in socks)
            for s in socks:
                s.close()
        forger = hostile._connect(hub.addr, hub.port)
        forger.sendall(hostile.proved(hostile._lines({"op": "hello", "token": hub.token, "rank": 9, "host": "forger",
                                                      "pid": 1}), hostile.greeting(forger)))
        me = "%s:%d" % forger.getsockname()[:2]
        assert hostile._answer(forger, 2) == "closed"
        zero = Phone.dial(str(run_dir), 0, "node0")
        with pytest.raises(OSError, match="refused this rank"):
            Phone.dial(str(run_dir), 0, "node0-again")
        zero.sock.close()
        assert _until(lambda: hub.snapshot()[0].status == "lost")
        log = _log(hub, run_dir)
    assert f"{me}: dropped: hello: rank 9 is not an integer in 0..1" in log
    assert "refused: a second hello for rank 0" in log and "rank 0: closed before it said done" in log


def test_two_flooding_addresses_close_their_own_pending_connections_not_a_third_s(run_dir, monkeypatch):
    # Before: past MAX_PENDING the oldest of all went: the third address's, whoever flooded.
    monkeypatch.setattr(conversation, "MAX_PENDING", 8)
    monkeypatch.setattr(conversation, "PER_PEER", 4)
    with Hub.open(str(run_dir), world=1) as hub:
        third = [_from("127.0.0.4", hub) for _ in range(2)]
        time.sleep(0.2)
        flood = [_from(a, hub) for a in ("127.0.0.2", "127.0.0.3") for _ in range(4)]
        time.sleep(0.5)
        assert [hostile._answer(s, 0.05) for s in third] == ["open", "open"]
        assert sum(hostile._answer(s, 0.05) == "closed" for s in flood) == 2
        assert "8 in all, and the most of them from 127.0.0." in _log(hub, run_dir)
        for s in third + flood:
            s.close()


def test_a_hello_50_ms_after_its_connect_is_welcomed_during_a_flood(run_dir, monkeypatch):
    # Before: under such a flood a rank whose hello came 50 ms after its connect was closed 5 times of 5.
    monkeypatch.setattr(conversation, "MAX_PENDING", 16)
    monkeypatch.setattr(conversation, "PER_PEER", 8)
    stop = threading.Event()

    def flood(addr: str) -> None:
        held = []
        while not stop.is_set():
            try:
                held.append(_from(addr, hub))
            except OSError:
                time.sleep(0.01)
            if len(held) > 200:
                for s in held[:100]:
                    s.close()
                del held[:100]
        for s in held:
            s.close()

    with Hub.open(str(run_dir), world=5, beat_s=0.2) as hub:
        threads = [threading.Thread(target=flood, args=(a,)) for a in ("127.0.0.2", "127.0.0.3")]
        for t in threads:
            t.start()
        time.sleep(0.3)
        seen = []
        for rank in range(5):
            s = _from("127.0.0.1", hub)
            time.sleep(0.05)
            s.settimeout(5)
            try:
                s.sendall(hostile.proved(hostile._lines({"op": "hello", "token": hub.token, "rank": rank, "host": "n",
                                                         "pid": 1}), hostile.greeting(s)))
            except OSError:
                seen.append("closed")
                continue
            s.settimeout(5)
            try:
                seen.append(json.loads(s.recv(4096).split(b"\n")[0] or b"{}").get("op"))
            except (OSError, ValueError):
                seen.append("closed")
            s.close()
        stop.set()
        for t in threads:
            t.join()
    assert seen == ["welcome"] * 5


def test_a_rank_whose_connections_a_flood_closes_dials_until_the_start_timeout(run_dir):
    # Before: the rank gave up after DIAL_S (20 s), so a flood longer than that ended the launch. Here a server
    # closes every connection before its welcome for 1.5 s (what a flood does to a rank's), past wait_s 0.5 s.
    srv = socket.create_server(("127.0.0.1", 0))
    t0 = time.monotonic()

    def serve() -> None:
        while True:
            c, _ = srv.accept()
            if time.monotonic() - t0 < 1.5:
                c.close()
                continue
            c.sendall(b'{"op": "hub", "nonce": "n"}\n')
            c.recv(4096)
            c.sendall(b'{"op": "welcome"}\n')
            time.sleep(0.5)
            c.close()
            return

    threading.Thread(target=serve, daemon=True).start()
    (run_dir / conversation.NAME).write_text(json.dumps({"addr": "127.0.0.1", "port": srv.getsockname()[1],
                                                         "token": "t", "start_s": 10}))
    p = Phone.dial(str(run_dir), 0, "node0", wait_s=0.5)
    assert p is not None and time.monotonic() - t0 >= 1.5
    p.sock.close()
    srv.close()
