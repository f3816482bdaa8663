"""An independent run's silent ranks, called hung once the others finished (bench.launch.left_behind): the rule,
with the finished count (bench's hub's) and the clock given by hand."""

from __future__ import annotations

from bench.launch.left_behind import FLOOR_S, LeftBehind


DONE: set[int] = set()


def _finish(_run_dir, *ranks: int) -> None:
    DONE.update(ranks)


def _lb(world: int, independent: bool = True) -> LeftBehind:
    DONE.clear()
    return LeftBehind(lambda: len(DONE), {"independent": independent, "world_size": world}, started=0.0)


def test_the_rest_finished_and_one_silent_for_as_long_as_they_took_is_hung(tmp_path):
    lb = _lb(4)
    assert not lb.hung(10.0, last_progress=10.0)          # nobody finished yet
    _finish(tmp_path, 0, 1, 2)
    assert not lb.hung(40.0, last_progress=40.0)          # they finish at 40 s: rank 3 gets 40 s more
    assert lb.done == 3 and lb.last_done == 40.0
    assert not lb.hung(79.0, last_progress=40.0)
    assert lb.hung(81.0, last_progress=40.0)


def test_a_slow_rank_that_still_steps_is_never_cut(tmp_path):
    lb = _lb(4)
    _finish(tmp_path, 0, 1, 2)
    lb.hung(20.0, last_progress=20.0)
    assert not any(lb.hung(t, last_progress=t - 1.0) for t in range(22, 400, 2))


def test_the_floor_holds_for_quick_runs_and_nothing_fires_before_half_finished(tmp_path):
    lb = _lb(4)
    _finish(tmp_path, 0)
    assert not lb.hung(500.0, last_progress=2.0), "one of four finished: not yet the rest"
    lb2 = _lb(4)
    _finish(tmp_path, 0, 1)
    lb2.hung(5.0, last_progress=5.0)                     # two finished by 5 s
    assert not lb2.hung(5.0 + FLOOR_S - 1, last_progress=5.0) and lb2.hung(5.0 + FLOOR_S + 1, last_progress=5.0)


def test_a_run_of_one_world_or_every_rank_done_is_left_to_the_watchdog(tmp_path):
    one = _lb(4, independent=False)
    _finish(tmp_path, 0, 1)
    assert not one.hung(1e6, 0.0)
    every = _lb(2)
    _finish(tmp_path, 0, 1)
    assert not every.hung(1e6, 0.0)
