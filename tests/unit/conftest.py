"""Unit tests start no process: a test that needs one is marked `process` (and `make test-fast` skips it).

The guard below makes the rule checkable rather than a comment: any
subprocess or fork from an unmarked unit test fails that test,
naming the command it tried to start.
"""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

# Importing torch runs `ldconfig -p` (to find CUDA's libraries): that is not a
# test starting a process, so torch is imported here, before any guard, once.
# Several unit tests import torch or DeepSpeed anyway (their collection does).
try:
    import torch  # noqa: F401
except ImportError:
    pass
# matplotlib's first import on a machine builds its font cache by running `fc-list`; on a fresh machine
# (where `make test-fast` runs before anything drew a plot) that would fail the first plotting test.
try:
    import matplotlib.font_manager  # noqa: F401
except ImportError:
    pass
# psycopg (bench.history.pg's PostgreSQL store) finds Debian's libpq with ctypes.util.find_library, which runs
# `ldconfig -p` at its first import: not a test starting a process either.
try:
    import psycopg  # noqa: F401
except ImportError:
    pass


class ProcessLaunched(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_processes(request, monkeypatch):
    if request.node.get_closest_marker("process"):
        yield
        return

    def refuse(what, original):
        def guard(*args, **kwargs):
            # The test's own thread only: the multi-host tests' hung runs wait out their timeouts in a session
            # fixture's threads while the unit tests run (tests/conftest.py orders them so), and those threads
            # still check their hosts over ssh.
            if threading.current_thread() is not threading.main_thread():
                return original(*args, **kwargs)
            shown = args[1] if what == "subprocess" and len(args) > 1 else args[:1]
            raise ProcessLaunched(f"a unit test started a process ({what}: {shown!r}); mark the test `process`")
        return guard

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess", subprocess.Popen._execute_child))
    monkeypatch.setattr(os, "fork", refuse("fork", os.fork))
    monkeypatch.setattr(os, "posix_spawn", refuse("posix_spawn", os.posix_spawn))
    yield


@pytest.fixture
def one_rank_group():
    """A real one-rank gloo process group in this process (an in-memory store, no socket), gone after the test."""
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()
