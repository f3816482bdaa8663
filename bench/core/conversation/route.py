"""Where the ranks reach bench's hub: this machine's address on the way to the launch's hosts.

    addr = reach_from(["node1", "node1", "node2"])   # master address first, then every host of the plan
    choose([("node1", ["127.0.1.1"]), ("node2", ["10.0.0.3"])], source)   # the same, pure: "10.0.0.3"'s source

A host that resolves to a loopback address here (127.0.0.0/8, ::1; Debian
maps the machine's own name to 127.0.1.1) is this machine: its ranks reach
bench on loopback, but the others need the address of the route toward
them, so the first host with any other address decides. A launch whose
hosts are all this machine listens on loopback. IPv6 addresses are taken
as they are (a link-local one would need its interface: not supported).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Callable, Iterable

# No packet goes to it: connecting a UDP socket only asks the kernel which source address its route takes.
_DEFAULT_ROUTE = ("192.0.2.1", "2001:db8::1")  # documentation prefixes (RFC 5737, RFC 3849)


def _addresses(host: str) -> list[str]:
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in found))


def source_toward(addr: str) -> str | None:
    """This machine's address on its route toward addr (a UDP connect sends nothing); None without a route."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def _loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def choose(resolved: Iterable[tuple[str, list[str]]], source: Callable[[str], str | None]) -> str | None:
    """The hub's address from each host's addresses here (in order): the source of the route toward the first
    address that is not loopback; loopback when every address is ("::1" where they are all IPv6); None when
    nothing resolved."""
    seen = []
    for _, addrs in resolved:
        for a in addrs:
            if not _loopback(a):
                if (src := source(a)) is not None:
                    return src
            else:
                seen.append(a)
    if not seen:
        return None
    return "::1" if all(":" in a for a in seen) else "127.0.0.1"


def reach_from(hosts: Iterable[str]) -> str:
    """Where the ranks of a launch on these hosts reach this machine (choose, on what they resolve to here); where
    none resolves, the source of this machine's default route, else its own name's address."""
    hosts = list(dict.fromkeys(hosts))
    got = choose(((h, _addresses(h)) for h in hosts), source_toward)
    if got is not None:
        return got
    for probe in _DEFAULT_ROUTE:
        if (src := source_toward(probe)) is not None:
            return src
    return socket.gethostbyname(socket.gethostname())
