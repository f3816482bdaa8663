"""Which words may be a host: validated before any of them reaches ssh, pdsh or mpirun.

    from bench.cluster.hostnames import validate_hostname
    validate_hostname("node1")                    # None: fine
    validate_hostname("-oProxyCommand=touch")     # "starts with '-', which ssh ... would read as an option"

DeepSpeed's launcher (0.19.8) takes any non-blank word of a hostfile as a
host, and its ssh check then runs `ssh WORD hostname`: a hostfile line
`-oProxyCommand=... slots=1` runs a command of the file's author. Pure: no
network, no subprocess.
"""

from __future__ import annotations

import ipaddress
import re
import string

_HOSTNAME_CHARS = frozenset(string.ascii_letters + string.digits + "-._")
_IPV6_ZONE = re.compile(r"[A-Za-z0-9_.-]+\Z")
_DIGITS = re.compile(r"[0-9]+\Z")


def validate_hostname(name: str) -> str | None:
    """Why `name` cannot be a host in a hostfile or a spec, or None if it can.

    Accepts RFC 1123 names (letters, digits, '-', '.', plus '_', which real
    clusters use), dotted-quad IPv4 and IPv6 addresses. Everything else is
    refused, above all what ssh, pdsh or mpirun would read as an option
    (leading '-'), a user (`@`), a port or a shell word.
    """
    if not name:
        return "empty host name"
    if len(name) > 253:
        return f"longer than 253 characters ({len(name)})"
    if name[0] == "-":
        return "starts with '-', which ssh, pdsh and mpirun would read as an option"
    if ":" in name:
        return _ipv6_reason(name)
    for ch in name:
        if ch not in _HOSTNAME_CHARS:
            if ch.isspace():
                return "contains whitespace"
            return f"contains {ch!r}, which a host name cannot have"
    labels = name.split(".")
    if _DIGITS.match(labels[-1]):
        # glibc reads "10.1", "123" or "010.0.0.1" (octal) as addresses, so an
        # all-numeric name must be an exact dotted quad or it means another host.
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return "is numeric but not a dotted-quad IPv4 address (a.b.c.d, no leading zeros)"
        return None
    for label in labels:
        if not label:
            return "has an empty label (a leading, trailing or doubled '.')"
        if len(label) > 63:
            return f"has a label longer than 63 characters ({len(label)})"
        if label[0] == "-" or label[-1] == "-":
            return f"has a label that starts or ends with '-' ({label!r})"
    return None


def _ipv6_reason(name: str) -> str | None:
    addr, sep, zone = name.partition("%")
    # ipaddress accepts any text as a zone id ("fe80::1%$(reboot)"): only an
    # interface name may follow the '%'.
    if sep and not _IPV6_ZONE.match(zone):
        return "has an IPv6 zone that is not an interface name"
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        return "contains ':' but is not an IPv6 address"
    return None
