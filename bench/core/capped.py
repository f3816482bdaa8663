"""A file bench reads whole, read no further than its cap: a wrong path (/dev/zero, a dataset) is bad input.

    data = read_capped("topology.conf", 64 << 20, "--topology")   # bytes, or BadInput naming the file

Every file bench reads whole has a cap a real one of its kind stays far
below (the hostfile's is 1 MiB, bench.cluster.hostfile): without one,
`--topology /dev/zero` reads until the kernel's OOM killer ends bench, and a
saved report that is /dev/zero is a MemoryError. The cap is read plus one
byte: a file exactly at the cap is read, one byte over is refused, and what
is read never exceeds cap + 1 bytes whatever the file is.
"""

from __future__ import annotations

from bench.core.errors import BadInput


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"


def read_capped(path: str, cap: int, label: str, kind: str = "the file it names") -> bytes:
    """The bytes of `path`, at most `cap` of them; BadInput "<label>: <path> ..." when it cannot be read or holds
    more than `cap` (label: the option or the file's role, kind: what it should be, for the message)."""
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except FileNotFoundError:
        raise BadInput(f"{label}: no such file {path!r}") from None
    except IsADirectoryError:
        raise BadInput(f"{label}: {path!r} is a directory, not {kind}") from None
    except OSError as e:
        raise BadInput(f"{label}: cannot read {path!r} ({e.strerror or e})") from None
    if len(data) > cap:
        raise BadInput(f"{label}: {path!r} holds more than {_size(cap)}: not {kind} (a wrong path?)")
    return data
