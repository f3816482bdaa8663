"""Connections that have not said hello yet (bench.core.conversation.wire): oldest first, and how many are held.

    s = Strangers()
    gone = s.add(conn)            # (the connection to close for it, why), if it passed a cap (else None)
    s.remove(conn)                # it said hello, or was closed
    s.expired(now)                # those older than HELLO_S, to close
    s.stale(now)                  # the oldest if it said nothing for STRANGER_S (freed when descriptors run out)

At most PER_PEER from one address and MAX_PENDING in all, the oldest going
first (OpenSSH's MaxStartups drops the newest instead; here a rank whose
connection goes dials again, so the oldest, most likely idle, goes): one
host that floods the port closes its own connections, not the ranks' of
other hosts. `conn` needs `.addr` (the peer's address) and `.since`.
"""

from __future__ import annotations

from typing import Any

from bench.core import conversation as talk


class Strangers:
    def __init__(self) -> None:
        self._all: dict[Any, None] = {}
        self._by_addr: dict[str, dict[Any, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, c: Any) -> tuple[Any, str] | None:
        """Hold c; (the connection that goes to make room for it, why), if one must: the oldest from its address,
        or of all."""
        mine = self._by_addr.setdefault(c.addr, {})
        gone = ((next(iter(mine)), f"{talk.PER_PEER} from {c.addr}") if len(mine) >= talk.PER_PEER else
                (next(iter(self._all)), f"{talk.MAX_PENDING} in all") if len(self._all) >= talk.MAX_PENDING else None)
        self._all[c] = None
        mine[c] = None
        return gone

    def remove(self, c: Any) -> None:
        if self._all.pop(c, 0) is None:
            mine = self._by_addr[c.addr]
            del mine[c]
            if not mine:
                del self._by_addr[c.addr]

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
