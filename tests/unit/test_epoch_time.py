"""Time per epoch: measured where whole epochs ran, estimated otherwise, and always labelled which.

Before, `epoch_s` was always mean steady step x steps per epoch and was
called "not estimated" as soon as the run reached an epoch; the report's
scaling table printed it as "T epoch" beside the study's wall-clock epochs.
"""

from __future__ import annotations

import pytest

from bench.analysis import report_analysis as ra
from bench.render.report import scaling_table
from bench.worker.loop import StepTimes, epoch_walls
from tests.unit.test_mfu import _figs, _summary
from tests.unit.test_report import VECTOR, point


def test_epoch_walls_are_whole_epochs_from_the_step_ends():
    times = StepTimes(began=10.0, ended=[11.0, 12.5, 13.0, 14.0, 16.0, 16.5, 17.0])
    # steps 0-2 end at 13.0 (3 s from the start), steps 3-5 at 16.5 (3.5 s); step 6 starts an unfinished epoch
    assert epoch_walls(times, 3) == [3.0, 3.5]
    assert epoch_walls(times, 8) == [] and epoch_walls(StepTimes(), 3) == []


def test_whole_epochs_are_measured_and_the_estimate_is_kept_beside():
    s = _summary("cpu", "cpu")
    s["steps_per_epoch"], s["total_steps"] = 3, 6
    s["ranks"][0]["epoch_wall_s"], s["ranks"][1]["epoch_wall_s"] = [2.0, 1.5], [2.2, 1.4]
    fig = _figs(s, precision="fp32")
    assert fig["epoch_wall_s"] == [2.2, 1.5]  # each epoch the slowest rank's
    assert fig["epoch_s"] == pytest.approx(1.85) and fig["epoch_s_estimated"] is False
    assert fig["epoch_s_estimate"] == pytest.approx(0.1 * 3)  # mean steady step 0.1 s x 3 steps
    assert fig["epoch_s_how"].startswith("measured: mean wall clock of 2 whole epoch(s)")


def test_an_estimate_is_called_one_even_when_the_run_reached_an_epoch():
    s = _summary("cpu")
    s["steps_per_epoch"], s["total_steps"] = 3, 6  # two whole epochs, but the ranks measured none
    fig = _figs(s, precision="fp32")
    assert fig["epoch_s_estimated"] is True and fig["epoch_s"] == pytest.approx(0.3)
    assert fig["epoch_s_how"].startswith("estimated: mean steady step time x steps per epoch")


def _measured(rec: dict, wall: float) -> dict:
    fig = rec["figures"]
    fig.update(epoch_s_estimate=fig["epoch_s"], epoch_s=wall, epoch_s_estimated=False, epoch_wall_s=[wall],
               epoch_s_how="measured: ...")
    return rec


def test_a_scaling_series_compares_like_with_like_and_says_which():
    recs = [_measured(point("strong", f"strong/study/gpus={n}", n, VECTOR[n], labels={"sense": "study"}),
                      VECTOR[n] * 1.1) for n in (1, 2, 4)]
    (s,) = ra.group(recs)[0].scaling
    assert s["epoch"] == "measured" and [p["seconds"] for p in s["points"]] == [VECTOR[n] * 1.1 for n in (1, 2, 4)]
    assert scaling_table(s).columns[1].header == "T epoch (measured)"
    # one point without a measured epoch: every point's estimate, never a measured T1 over an estimated TN
    recs[2] = point("strong", "strong/study/gpus=4", 4, VECTOR[4], labels={"sense": "study"})
    (s,) = ra.group(recs)[0].scaling
    assert s["epoch"] == "estimated" and [p["seconds"] for p in s["points"]] == [VECTOR[n] for n in (1, 2, 4)]
    assert scaling_table(s).columns[1].header == "T epoch (estimated)"
