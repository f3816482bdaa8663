"""Connections that have not said hello yet (bench.core.conversation.wire): oldest first, and how many are held.

    s = Strangers()
    gone = s.add(conn)            # (the connection to close for it, why), if it passed a cap (else None)
    s.remove(conn)                # it said hello, or was closed
    s.expired(now)                # those older than HELLO_S, to close
    s.stale(now)                  # the oldest if it said nothing for STRANGER_S (freed when descriptors run out)

At most PER_PEER from one source (an IPv4 address, an IPv6 /64) and
MAX_PENDING in all, the oldest going first (OpenSSH's MaxStartups drops the
newest instead; here a rank whose connection goes dials again, so the
oldest, most likely idle, goes), and past MAX_PENDING the oldest of the
source that holds the most: hosts that flood the port close their own
connections, not the ranks' of other hosts. `conn` needs `.addr` (the peer's address) and `.since`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from bench.core import conversation as talk


def source(addr: str) -> str:
    """Whose connection this is, for the caps: an IPv4 address, or an IPv6 address's /64 (one host holds a whole
    /64: counted per address, it would pass PER_PEER as often as it likes)."""
    if ":" not in addr:
        return addr
    try:
        ip = ipaddress.IPv6Address(addr)
    except ValueError:
        return addr
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ipaddress.IPv6Network(f"{ip}/64", strict=False))


class Strangers:
    def __init__(self) -> None:
        self._all: dict[Any, str] = {}  # each connection -> its source
        self._by_src: dict[str, dict[Any, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, c: Any) -> tuple[Any, str] | None:
        """Hold c; (the connection that goes to make room for it, why), if one must: the oldest from its source
        past PER_PEER; past MAX_PENDING, the oldest of the source that holds the most (the flooder's own, never
        the oldest of all: that would be another host's rank as soon as two addresses flood)."""
        src = source(c.addr)
        mine = self._by_src.setdefault(src, {})
        gone = None
        if len(mine) >= talk.PER_PEER:
            gone = (next(iter(mine)), f"{talk.PER_PEER} from {src}")
        elif len(self._all) >= talk.MAX_PENDING:
            most = max(self._by_src.values(), key=len)
            gone = (next(iter(most)), f"{talk.MAX_PENDING} in all, and the most of them from "
                                      f"{source(next(iter(most)).addr)}")
        self._all[c] = src
        mine[c] = None
        return gone

    def remove(self, c: Any) -> None:
        if (src := self._all.pop(c, None)) is not None:
            mine = self._by_src[src]
            del mine[c]
            if not mine:
                del self._by_src[src]

    def expired(self, now: float) -> list[Any]:
        out = []
        for c in self._all:
            if now - c.since <= talk.HELLO_S:
                break
            out.append(c)
        return out

    def stale(self, now: float) -> Any | None:
        oldest = next(iter(self._all), None)
        return oldest if oldest is not None and now - oldest.since > talk.STRANGER_S else None
