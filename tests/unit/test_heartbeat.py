"""bench.core.heartbeat: the pulse bench keeps in the run directory and the guard every rank runs on it.

Threads only, no process: the ranks' side under real SIGKILLs of bench is in
tests/multiproc/test_interrupt.py and tests/multihost/test_faults.py.
"""

from __future__ import annotations

import os
import threading
import time

from bench.core import heartbeat


def test_a_beat_rewrites_the_same_bytes_in_place(tmp_path):
    heartbeat.beat(str(tmp_path), 1)
    first = os.stat(heartbeat.path_of(str(tmp_path)))
    heartbeat.beat(str(tmp_path), 123456)
    again = os.stat(heartbeat.path_of(str(tmp_path)))
    assert heartbeat.read(str(tmp_path)) == b"%020d\n" % 123456
    assert first.st_ino == again.st_ino and first.st_size == again.st_size == heartbeat.WIDTH + 1


def test_beating_keeps_the_guard_quiet_and_cleans_up(tmp_path):
    orphaned = threading.Event()
    with heartbeat.beating(str(tmp_path), every_s=0.05):
        heartbeat.watch(str(tmp_path), 1.0, lambda s: orphaned.set(), every_s=0.05)
        assert not orphaned.wait(2.0)
    assert not os.path.exists(heartbeat.path_of(str(tmp_path)))


def test_the_guard_fires_once_the_beat_stops(tmp_path):
    silent = []
    done = threading.Event()
    with heartbeat.beating(str(tmp_path), every_s=0.05):
        heartbeat.watch(str(tmp_path), 0.5, lambda s: (silent.append(s), done.set()), every_s=0.05)
        time.sleep(0.3)
    t0 = time.monotonic()
    assert done.wait(10.0)
    assert len(silent) == 1 and silent[0] > 0.5
    assert time.monotonic() - t0 >= 0.45  # not before the bound: a beat was seen until the block ended


def test_the_guard_fires_when_no_beat_ever_came(tmp_path):
    done = threading.Event()
    heartbeat.watch(str(tmp_path / "never"), 0.2, lambda s: done.set(), every_s=0.05)
    assert done.wait(10.0)


def test_a_beat_that_cannot_be_written_is_not_fatal(tmp_path):
    gone = tmp_path / "gone"
    with heartbeat.beating(str(gone), every_s=0.01):
        time.sleep(0.05)  # every beat fails (no such directory): nothing raises


def test_the_watcher_answers_each_new_stack_request_once(tmp_path):
    run = str(tmp_path)
    heartbeat.ask(run)  # there before the watcher started: an older run's, not answered
    got: list[str] = []
    answered = threading.Event()
    with heartbeat.beating(run, every_s=0.05):
        heartbeat.watch(run, 5.0, lambda s: None, lambda r: (got.append(r), answered.set()), every_s=0.05)
        time.sleep(0.3)
        assert got == []
        first = heartbeat.ask(run)
        assert answered.wait(5.0)
        time.sleep(0.3)  # the same request is not answered twice
        answered.clear()
        second = heartbeat.ask(run)
        assert answered.wait(5.0)
    assert got == [first, second] and first != second
    assert heartbeat.read_request(run) == second
