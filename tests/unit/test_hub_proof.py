"""The token never crosses the network (issue 52): the hub greets each connection with a nonce, a rank's hello
answers HMAC-SHA256(token, nonce), so what a rank sends (seen on the wire) proves nothing on another connection.
A real Phone against a real Hub through a recording TCP relay on loopback."""

from __future__ import annotations

import json
import socket
import threading

from bench.core import conversation
from bench.core.conversation.hub import Hub
from bench.core.conversation.phone import Phone
from tests import hostile


def _relay(to: tuple[str, int], seen: list[bytes]) -> socket.socket:
    """A listener that relays one connection to `to`, keeping every byte either way in seen."""
    srv = socket.create_server(("127.0.0.1", 0))

    def pipe(a: socket.socket, b: socket.socket) -> None:
        while data := a.recv(65536):
            seen.append(data)
            b.sendall(data)
        b.shutdown(socket.SHUT_WR)

    def serve() -> None:
        c, _ = srv.accept()
        up = socket.create_connection(to)
        threading.Thread(target=pipe, args=(c, up), daemon=True).start()
        threading.Thread(target=pipe, args=(up, c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_a_hello_seen_on_the_wire_gives_nothing(tmp_path):
    # Before: the token travelled in clear in every hello; anyone who saw one could say hello as any rank.
    (tmp_path / "logs").mkdir()
    with Hub.open(str(tmp_path), world=2, beat_s=0.2) as hub:
        seen: list[bytes] = []
        srv = _relay((hub.addr, hub.port), seen)
        doc = json.loads((tmp_path / conversation.NAME).read_text())
        (tmp_path / conversation.NAME).write_text(json.dumps({**doc, "port": srv.getsockname()[1]}))
        p = Phone.dial(str(tmp_path), 0, "node0")
        wire = b"".join(seen)
        assert hub.token.encode() not in wire and b'"token"' not in wire
        hello = next(x for x in wire.split(b"\n") if b'"hello"' in x)
        replay = hostile._connect(hub.addr, hub.port)
        hostile.greeting(replay)
        replay.sendall(hello.replace(b'"rank": 0', b'"rank": 1') + b"\n" + hello + b"\n")
        assert hostile._answer(replay, 2) == "closed" and 1 not in hub.snapshot()
        hub.flush_log()
        assert "a hello without this launch's proof" in (tmp_path / "logs" / "hub.log").read_text()
        p.sock.close()
        srv.close()
