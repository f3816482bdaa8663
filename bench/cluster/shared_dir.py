"""Is the results root one directory, at the same path, on every host?

    with planted(root) as (path, nonce):       # bench writes a nonce file into the root
        answers = {h: <answer(path, nonce) run on h> for h in hosts}
    problem(answers[h], root)                  # None, or why h must not take part

The ranks write their logs and figures into the run directory and the
launcher reads them back, so the directory must be shared storage (NFS,
Lustre, the image's bind mount) at the same path everywhere. A host that
sees no such file, or another one, has a different directory at that path
(a local disk, another mount); one that cannot write beside it would fail
at its first log line. The check takes one read and one create per host;
it runs inside bench.cluster.preflight's probe, in parallel with the version
check, so it costs no extra ssh round trip.

The root is checked, not results/<id>: the run id is reserved only once
the hosts have passed, so a refused run leaves no directory behind, and a
run directory is a fresh subdirectory of the root, on the same mount.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import secrets
import textwrap
from typing import Iterator

from bench.core.errors import StorageFailed

MARK = ".bench-shared-"


@contextlib.contextmanager
def planted(root: str) -> Iterator[tuple[str, str]]:
    """A nonce file in root (made if missing) for the hosts to read; removed afterwards."""
    nonce = secrets.token_hex(8)
    path = os.path.join(os.path.abspath(root), MARK + nonce)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "x") as f:
            f.write(nonce)
    except OSError as e:
        raise StorageFailed(path, e.strerror or str(e)) from None
    try:
        yield path, nonce
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def answer(path, nonce):
    """On a host: does path hold nonce, and may a file be created beside it? (Standard library only.)"""
    import os
    import socket
    try:
        with open(path) as f:
            seen = f.read().strip()
    except FileNotFoundError:
        return {"seen": "missing"}
    except OSError as e:
        return {"seen": "unreadable", "error": e.strerror}
    if seen != nonce:
        return {"seen": "other"}
    probe = f"{path}.{socket.gethostname()}.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, b"w")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return {"seen": "same", "writable": False, "error": e.strerror}
    return {"seen": "same", "writable": True}


# answer()'s source, for probe code that runs as `python -c` where bench may not be importable.
ANSWER_SOURCE = textwrap.dedent(inspect.getsource(answer))


def problem(ans: dict | None, root: str) -> str | None:
    """Why a host's answer rules it out, in the words of a preflight line; None when it shares root."""
    root = os.path.abspath(root)
    if ans is None:
        return f"did not check {root}"
    seen = ans.get("seen")
    if seen == "same":
        return None if ans.get("writable") else f"cannot write in {root} ({ans.get('error')})"
    if seen == "unreadable":
        return f"cannot read bench's file in {root} ({ans.get('error')})"
    return f"{root} is not the directory bench wrote (not shared storage?)"
