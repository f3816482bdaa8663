"""An independent run's silent ranks, called hung once the others finished (bench.launch.left_behind): the rule
on a real folder, with the clock given by hand."""

from __future__ import annotations

from bench.launch.left_behind import FLOOR_S, LeftBehind


def _finish(run_dir, *ranks: int) -> None:
    (run_dir / "alone").mkdir(exist_ok=True)
    for r in ranks:
        (run_dir / "alone" / f"rank{r}.json").write_text("{}")


def test_the_rest_finished_and_one_silent_for_as_long_as_they_took_is_hung(tmp_path):
    lb = LeftBehind(str(tmp_path), {"independent": True, "world_size": 4}, started=0.0)
    assert not lb.hung(10.0, last_progress=10.0)          # nobody finished yet
    _finish(tmp_path, 0, 1, 2)
    assert not lb.hung(40.0, last_progress=40.0)          # they finish at 40 s: rank 3 gets 40 s more
    assert lb.done == 3 and lb.last_done == 40.0
    assert not lb.hung(79.0, last_progress=40.0)
    assert lb.hung(81.0, last_progress=40.0)


def test_a_slow_rank_that_still_steps_is_never_cut(tmp_path):
    lb = LeftBehind(str(tmp_path), {"independent": True, "world_size": 4}, started=0.0)
    _finish(tmp_path, 0, 1, 2)
    lb.hung(20.0, last_progress=20.0)
    assert not any(lb.hung(t, last_progress=t - 1.0) for t in range(22, 400, 2))


def test_the_floor_holds_for_quick_runs_and_nothing_fires_before_half_finished(tmp_path):
    lb = LeftBehind(str(tmp_path), {"independent": True, "world_size": 4}, started=0.0)
    _finish(tmp_path, 0)
    assert not lb.hung(500.0, last_progress=2.0), "one of four finished: not yet the rest"
    _finish(tmp_path, 1)
    lb2 = LeftBehind(str(tmp_path), {"independent": True, "world_size": 4}, started=0.0)
    lb2.hung(5.0, last_progress=5.0)                     # two finished by 5 s
    assert not lb2.hung(5.0 + FLOOR_S - 1, last_progress=5.0) and lb2.hung(5.0 + FLOOR_S + 1, last_progress=5.0)


def test_a_run_of_one_world_or_every_rank_done_is_left_to_the_watchdog(tmp_path):
    _finish(tmp_path, 0, 1)
    assert not LeftBehind(str(tmp_path), {"world_size": 4}, started=0.0).hung(1e6, 0.0)
    every = LeftBehind(str(tmp_path), {"independent": True, "world_size": 2}, started=0.0)
    assert not every.hung(1e6, 0.0)
