"""bench.launch.strays on real processes: a launcher whose child left its process group (as pdsh's ssh module's
setsid() does) outlives the group's stop, and is stopped by PID after it; a reused PID is never signalled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from bench.launch import strays
from bench.launch.execute import stop_group

pytestmark = pytest.mark.process

# A launcher as pdsh is one: a child in a session of its own (setsid), and one in the launcher's group.
LAUNCHER = textwrap.dedent("""
    import subprocess, sys, time
    away = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    near = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(away.pid, near.pid, flush=True)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    return strays._stat(pid) is not None


def test_a_child_that_left_the_group_outlives_its_stop_and_is_stopped_by_pid_after_it():
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    away = near = None
    try:
        away, near = map(int, proc.stdout.readline().split())
        kids = stop_group(proc, grace=1.0, launcher="local")
        assert set(kids) == {away}, kids            # the one outside the launcher's group, found before its stop
        assert not _alive(near), "the group's stop ends the child inside it"
        assert _alive(away), "the group's stop cannot reach a child in a session of its own (the leak)"
        t0 = time.monotonic()
        assert strays.stop(kids, grace=2.0) == [away]
        assert not _alive(away) and time.monotonic() - t0 < 5
        assert strays.stop(kids) == [], "a child that ended is not signalled again"
    finally:
        for pid in (away, near):
            if pid and _alive(pid):
                os.kill(pid, 9)
        proc.kill()
        proc.wait()


def test_a_pid_that_is_another_process_now_is_not_signalled():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = strays._stat(other.pid)[2]
        assert strays.stop({other.pid: started + 1}) == []   # the same PID, another start time: a reused PID
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
