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


def mount_of(path, mountinfo="/proc/self/mountinfo"):
    """On a host: the mount holding path, as this host's kernel mounted it: {"type", "mount", "source",
    "options"} (only the options that change what another host sees and when: NFS's caches and close-to-open,
    locks, read-only), or None where mountinfo cannot be read. (Standard library only.)"""
    import os
    keep = ("vers", "actimeo", "acregmin", "acregmax", "acdirmin", "acdirmax", "lookupcache", "nocto", "noac",
            "local_lock", "sync", "soft", "flock", "localflock", "noflock", "ro")
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    real, best = os.path.realpath(path), None
    for line in lines:
        left, sep, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if not sep or len(a) < 6 or len(b) < 2:
            continue
        point = a[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):  # the last of equal points is on top
            opts = a[5].split(",") + (b[2].split(",") if len(b) > 2 else [])
            best = (point, {"type": b[0], "mount": point, "source": b[1],
                            "options": list(dict.fromkeys(o for o in opts if o.split("=")[0] in keep))})
    return best[1] if best else None


def answer(path, nonce):
    """On a host: does path hold nonce, and may a file be created beside it? (Standard library only; mount_of
    must be defined beside it.)"""
    import os
    import socket
    fs = mount_of(os.path.dirname(path))
    try:
        with open(path) as f:
            seen = f.read().strip()
    except FileNotFoundError:
        return {"seen": "missing", "fs": fs}
    except OSError as e:
        return {"seen": "unreadable", "error": e.strerror, "fs": fs}
    if seen != nonce:
        return {"seen": "other", "fs": fs}
    probe = f"{path}.{socket.gethostname()}.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, b"w")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return {"seen": "same", "writable": False, "error": e.strerror, "fs": fs}
    return {"seen": "same", "writable": True, "fs": fs}


# answer()'s source and mount_of()'s, for probe code that runs as `python -c` where bench may not be importable.
ANSWER_SOURCE = textwrap.dedent(inspect.getsource(mount_of)) + "\n" + textwrap.dedent(inspect.getsource(answer))


def fs_text(fs: dict | None) -> str:
    """What the results root is on a host, in a few words: "nfs4 /shared (vers=4.2, lookupcache=pos)"."""
    if not fs:
        return "filesystem unknown"
    opts = f" ({', '.join(fs['options'])})" if fs.get("options") else ""
    return f"{fs['type']} {fs['mount']}{opts}"


def fs_warning(fs: dict | None) -> str | None:
    """Why this mount may show the ranks' files late or torn to another host, or None. nocto turns NFS's
    close-to-open off: a file one host closed may be read stale or short on another (nfs(5))."""
    if fs and "nocto" in fs.get("options", []):
        return (f"{fs['mount']} is {fs['type']} mounted with nocto: close-to-open is off, so a file one host wrote "
                "may be read stale or short on another; mount it without nocto")
    return None


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
