"""What the plots draw, read off matplotlib's own artists: a missing value is not drawn, scales get their own axis.

Seen in a real `bench report` of a memory sweep (2 CPU ranks, vit-micro):
pipeline stages, which have no formula, got the formula's diamond at 0
(read: "the formula says 0"), and 7 MB of model states were drawn under
840 MB of resident set on one linear axis, where they were invisible.
"""

from __future__ import annotations

import pytest

from bench.analysis import report_analysis as ra
from bench.render import plots
from tests.unit.test_report import point

MB = 1e6


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions make, kept open instead of saved."""
    kept = []
    monkeypatch.setattr(plots, "_save", lambda plt, fig, path: kept.append(fig) or path)
    yield kept
    import matplotlib.pyplot as plt
    for f in kept:
        plt.close(f)


def _memory_point(strategy: str, formula: bool, states_mb: float = 7.0, rss_mb: float = 840.0) -> dict:
    rec = point("memory", f"memory/{strategy}/gpus=2", 2, 10.0, labels={"strategy": strategy})
    fig = rec["figures"]
    per = states_mb * MB / 4
    fig["model_states"] = {"measured": {"params": per, "grads": per, "master_params": per, "optimizer_states": per,
                                        "buffers": 0, "total": 4 * per},
                           "formula": {"params": per, "grads": per, "master_params": 0, "optimizer_states": 2 * per,
                                       "total": 4 * per} if formula else None,
                           "deepspeed_estimate": None}
    fig["peak_memory_bytes"] = [int(rss_mb * MB)] * 2
    fig["memory_kind"] = "rss"
    if not formula:
        fig["comm"] = {"bytes_per_step": 0.2 * MB, "seconds_per_step": 0.01, "analytic": None}
    else:
        fig["comm"] = {"bytes_per_step": 2.8 * MB, "seconds_per_step": 0.01,
                       "analytic": {"bytes_per_step": 1.8 * MB, "formula": "2 Psi b (n-1)/n"}}
    return rec


def _group() -> ra.Group:
    (g,) = ra.group([_memory_point("zero1", True), _memory_point("pipeline", False)])
    return g


def test_no_formula_is_no_diamond_and_no_analytic_no_bar(figures):
    plots.comm_memory("x.png", _group())
    (fig,) = figures
    volume, states = fig.axes
    (diamonds,) = [ln for ln in states.get_lines() if ln.get_label() == "formula total"]
    assert list(diamonds.get_xdata()) == [0]  # zero1 only; before: [0, 1] with the pipeline's at 0
    analytic = [c for c in volume.containers if c.get_label().startswith("analytic")]
    assert [len(c.patches) for c in analytic] == [1]
    assert "(no formula)" in states.get_xticklabels()[1].get_text()


def test_model_states_and_peak_memory_each_get_their_own_axis(figures):
    plots.memory("m.png", _group())
    (fig,) = figures
    states, peak, throughput = fig.axes
    # 7 MB of states fill their own axis; before, the 840 MB resident set set its scale and they were a sliver.
    assert states.get_ylim()[1] < 10
    assert peak.get_ylim()[1] >= 840 and "resident set" in peak.get_title()
    (diamonds,) = [ln for ln in states.get_lines() if "formula" in ln.get_label()]
    assert list(diamonds.get_xdata()) == [0]
    assert throughput.get_title().startswith("throughput")


def test_a_missing_training_accuracy_is_not_drawn_at_zero(figures):
    recs = [point("batch", f"batch/mb={mb}/gpus=1", 1, 100.0 / mb, micro_batch=mb, labels={"micro_batch": mb})
            for mb in (16, 32, 64)]
    recs[1]["figures"]["train_acc"] = None  # e.g. pipeline stages: train_batch returns the loss only
    (g,) = ra.group(recs)
    plots.batch_curves("b.png", g)
    (fig,) = figures
    (train,) = [ln for ln in fig.axes[1].get_lines() if ln.get_label().startswith("train")]
    assert list(train.get_xdata()) == [16, 64] and 0 not in list(train.get_ydata())
