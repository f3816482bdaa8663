"""Two hostfile names that reach one machine are refused: it would be measured twice and judged as two nodes.

    refuse({"node0005": "node0005", "node0005.ib": "node0005"}, "hostname", "hosts.txt")
    # BadInput: hosts.txt:5 'node0005' and hosts.txt:9 'node0005.ib' reach one machine (its hostname
    #           'node0005'): name each machine once

`node0005` and `node0005.ib` (an interface's name), or a name and its
address, are one machine: its GPUs would train twice at once against each
other, its pairs with itself would be judged as a link, and a fault on it
would count twice. The hostfile parser compares names (ignoring case);
only the machine can say what a name reaches: the hostname it gives when
reached (preflight) and its GPUs' UUIDs (the inventory, where it lists them).
"""

from __future__ import annotations

from bench.core.errors import BadInput


def hostfile_lines(path: str | None) -> dict[str, int]:
    """{host: its line in the hostfile}; {} where there is no file or it cannot be read now (the parser read it
    before: the message then names the hosts alone)."""
    if not path:
        return {}
    out: dict[str, int] = {}
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20).decode("utf-8-sig", errors="replace")
    except OSError:
        return {}
    for no, raw in enumerate(text.split("\n"), start=1):
        words = raw.split("#", 1)[0].split()
        if words:
            out.setdefault(words[0], no)
    return out


def _where(host: str, lines: dict[str, int], path: str | None) -> str:
    return f"{path}:{lines[host]} {host!r}" if host in lines else repr(host)


def refuse(identity: dict[str, str | tuple[str, ...]], what: str, path: str | None) -> None:
    """BadInput naming the first two hosts (in `identity`'s order, the hostfile's) whose identities are the same
    (one string, compared ignoring case, or a set of GPU UUIDs that overlap); `what` names the identity."""
    lines = hostfile_lines(path)
    seen: dict[str, str] = {}
    for host, ident in identity.items():
        keys = [ident] if isinstance(ident, str) else list(ident)
        for key in (k.strip() for k in keys if k and k.strip()):
            first = seen.setdefault(key.lower(), host)
            if first != host:
                raise BadInput(f"{_where(first, lines, path)} and {_where(host, lines, path)} reach one machine "
                               f"({what} {key!r}): name each machine once in the hostfile")
