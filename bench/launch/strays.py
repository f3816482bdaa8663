"""The launcher's children that left its process group, found before it is stopped and stopped after it.

    kids = strays.before(proc.pid)    # its direct children in a session or group of their own, as they are now
    ...                               # the launcher and its group stopped
    strays.stop(kids)                 # each one still the same process: SIGTERM, then SIGKILL

Why: bench stops a launch by its launcher's process group, but pdsh's ssh
module calls setsid() in each ssh child (so that ssh prompts for nothing;
pdsh's sshcmd.c), and those children are in no group of bench's. Mostly
they end with their remote command, once bench has stopped the ranks by
PID. A host whose network is gone never answers: its ssh has nothing in
flight and no keepalive, so it waited on after bench had exited, with the
run directory in its command line (seen after test_hangs' dropped host).

A child is known by its PID and its start time (/proc/PID/stat), so a PID
reused after it ended is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent PID, process group, start time in clock ticks) of a process, None when it is gone (a zombie
    too: it has ended, whether or not its new parent has reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command, which may hold spaces and parentheses
    try:
        return None if fields[0] == "Z" else (int(fields[1]), int(fields[2]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def before(launcher: int) -> dict[int, int]:
    """{pid: start time} of the launcher's direct children whose process group is not the launcher's."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None and st[0] == launcher and st[1] != launcher:
            out[int(name)] = st[2]
    return out


def _same(pid: int, started: int) -> bool:
    st = _stat(pid)
    return st is not None and st[2] == started


def stop(kids: dict[int, int], grace: float = 2.0) -> list[int]:
    """SIGTERM each child that is still the same process, SIGKILL what is left after `grace` s; the PIDs
    signalled. An exited child that nobody reaps (its parent, the launcher, is gone) is reaped by init."""
    signalled = []
    for pid, started in kids.items():
        if _same(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
                signalled.append(pid)
    deadline = time.monotonic() + grace
    while any(_same(p, kids[p]) for p in signalled) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in signalled:
        if _same(pid, kids[pid]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return signalled
