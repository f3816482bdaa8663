"""The start barrier of an independent launch (bench.worker.barrier) with ranks that never start: the first barrier
waits QUIET_S past the last start, then says so once for the launch; its later barriers do not wait again."""

from __future__ import annotations

import time

from bench.worker import barrier


def _launch(tmp_path, started: int):
    run_dir = tmp_path / "run"
    (run_dir / "ranks").mkdir(parents=True)
    for r in range(started):
        (run_dir / "ranks" / f"pid-{r}").write_text(f"node1 {100 + r}\n")
    return run_dir


def test_a_launch_waits_for_ranks_that_never_started_once(tmp_path, monkeypatch):
    monkeypatch.setattr(barrier, "QUIET_S", 0.5)
    run_dir = _launch(tmp_path, started=1)  # one rank of two started; the other never will
    first = {"dir": str(tmp_path / "b1"), "count": 2, "timeout_s": 30}
    waited = barrier.wait(str(run_dir), first, 0, entry="rank0")
    assert 0.5 <= waited < 5
    assert (run_dir / "ranks" / barrier.SETTLED).read_text() == "1\n"
    t0 = time.monotonic()
    barrier.wait(str(run_dir), {"dir": str(tmp_path / "b2"), "count": 2, "timeout_s": 30}, 0, entry="rank0")
    assert time.monotonic() - t0 < 0.4  # the launch's second barrier: no second wait for the missing rank


def test_a_rank_that_started_after_the_launch_settled_gets_the_whole_quiet_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(barrier, "QUIET_S", 0.5)
    run_dir = _launch(tmp_path, started=2)
    (run_dir / "ranks" / barrier.SETTLED).write_text("1\n")  # settled at one rank; then a second one started
    b = tmp_path / "b"
    b.mkdir()
    (b / barrier.entry_name(str(run_dir), "rank1")).write_text("0\n")  # ... and is in
    t0 = time.monotonic()
    barrier.wait(str(run_dir), {"dir": str(b), "count": 3, "timeout_s": 30}, 0, entry="rank0")
    assert 0.5 <= time.monotonic() - t0 < 5
    assert (run_dir / "ranks" / barrier.SETTLED).read_text() == "2\n"
