"""What comes off one connection (bench.core.conversation): lines of at most a limit, then checked messages.

    lines = Lines(limit=talk.MAX_HELLO)
    for line in lines.feed(data):       # TooLong once the line being read passes the limit
        msg = parse(line)               # Bad: not one JSON object with a string "op"
        rank = whole(msg, "rank", 0, world - 1); host = text(msg, "host", 255)

The line being read is kept as the chunks recv gave (joined once, when its
newline comes), so a long line costs its length, not its length squared.
Every byte here comes from the network: a check raises Bad naming the field,
and the caller drops that connection alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from typing import Any


class TooLong(Exception):
    """The line being read passed its connection's limit."""


class Bad(Exception):
    """A line that is not a message of the protocol; says what is wrong with it."""


class Lines:
    """One connection's input: its complete lines out, the partial one kept in chunks, at most `limit` bytes."""

    __slots__ = ("limit", "_chunks", "_size")

    def __init__(self, limit: int):
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    def _keep(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._size > self.limit:
            raise TooLong(f"a line of over {self.limit} bytes")
        if piece:
            self._chunks.append(piece)

    def feed(self, data: bytes) -> list[bytes]:
        out, start = [], 0
        while (end := data.find(b"\n", start)) >= 0:
            self._keep(data[start:end])
            out.append(b"".join(self._chunks))
            self._chunks, self._size, start = [], 0, end + 1
        self._keep(data[start:])
        return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number here")


_JSON = json.JSONDecoder(parse_constant=_no_constant)  # one, not one per message (json.loads with an option)


def parse(line: bytes) -> dict[str, Any]:
    """One message: a JSON object with a string "op" (NaN and Infinity refused, nesting as deep as Python allows)."""
    try:
        msg = _JSON.decode(line.decode())
    except RecursionError:
        raise Bad("JSON nested too deep") from None
    except ValueError as e:  # UnicodeDecodeError and a 5,000-digit integer too
        raise Bad(f"not JSON ({str(e)[:80]})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise Bad("not a JSON object with an op")
    return msg


def whole(msg: dict[str, Any], key: str, lo: int, hi: int) -> int:
    """msg[key], an integer (not a boolean) in lo..hi."""
    v = msg.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise Bad(f"{msg['op']}: {key} {v!r:.40} is not an integer in {lo}..{hi}")
    return v


def finite(v: Any, what: str) -> float:
    """v, a finite number (1e400 parses as infinity, a 400-digit integer overflows a float: refused); what names it."""
    try:
        f = float(v) if type(v) in (int, float) else math.nan
    except OverflowError:
        f = math.nan
    if not math.isfinite(f):
        raise Bad(f"{what} {v!r:.40} is not a finite number")
    return f


def number(msg: dict[str, Any], key: str) -> float:
    """msg[key], a finite number."""
    return finite(msg.get(key), f"{msg['op']}: {key}")


def text(msg: dict[str, Any], key: str, most: int) -> str:
    """msg[key], a string of at most `most` characters."""
    v = msg.get(key)
    if not isinstance(v, str) or len(v) > most:
        raise Bad(f"{msg['op']}: {key} is not a string of at most {most} characters")
    return v


def proof(token: str, nonce: str) -> str:
    """What a rank's hello says to prove it holds the launch's token: HMAC-SHA256 of the hub's nonce for this
    connection under the token (OpenSSH's and munge's rule: the secret itself never crosses the network)."""
    return hmac.new(token.encode(), nonce.encode(), hashlib.sha256).hexdigest()
