"""tests/unit/conftest.py's guard: an unmarked unit test that starts a process fails, naming the command."""

from __future__ import annotations

import subprocess
import threading

import pytest


def test_a_process_started_by_an_unmarked_unit_test_fails_it():
    with pytest.raises(AssertionError, match=r"a unit test started a process \(subprocess: \['true'\]\)"):
        subprocess.run(["true"])


def test_a_process_started_by_another_thread_is_not_the_test_s():
    # The multi-host hung runs' threads check their hosts while the unit tests run (tests/conftest.py).
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(subprocess.run(["true"]).returncode))
    t.start()
    t.join()
    assert done == [0]
