"""The study's figures derived through bench.metrics match what it printed.

Each check sets two things the study printed apart against each other (its
seconds and its speedups), or bench.analysis.paper against the code that
uses it; restating paper.py's own constants (which a typo would change in
both places at once) is no check and is left out.
"""

from __future__ import annotations

import pytest

from bench.analysis import paper


def _decimals(x: float) -> int:
    text = repr(x)
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("series", list(paper.SERIES.values()), ids=list(paper.SERIES))
def test_derived_speedups_match_the_stated_ones(series):
    derived = {p.gpus: p for p in paper.derive(series)}
    for n, stated in series.stated_speedup.items():
        d = _decimals(stated)
        assert f"{derived[n].speedup:.{d}f}" == f"{stated:.{d}f}", (series.name, n)


def test_the_series_the_report_lines_up_state_a_speedup_to_check():
    # bench report --compare-paper draws these beside a strong sweep: their seconds must be checked above.
    assert {s.name for s in paper.SERIES.values() if s.stated_speedup} >= {"vector-intra", "vector-inter"}


def test_vector_intra_node_table():
    points = paper.derive(paper.VECTOR_INTRA)
    assert [p.gpus for p in points] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert points[0].speedup == 1.0 and points[0].efficiency == 1.0
    assert points[0].karp_flatt is None
    last = points[-1]
    assert f"{last.efficiency:.0%}" == "97%"  # as the study printed it
    assert last.karp_flatt == pytest.approx(0.0044036, abs=1e-7)


def test_vector_inter_node_table():
    points = {p.gpus: p for p in paper.derive(paper.VECTOR_INTER)}
    assert sorted(points) == [1, 2, 4, 8, 16, 32]
    assert f"{points[32].speedup:.1f}" == "29.6"
    # The 1-GPU baseline is the CIFAR-10 figure: 2 GPUs come out superlinear.
    assert points[2].efficiency > 1 and points[2].karp_flatt < 0


def test_tesla_got_no_speedup():
    (one, five) = paper.derive(paper.TESLA)
    assert one.gpus == 1 and five.gpus == 5 and five.speedup < 1  # the study: slower on 5 GPUs than on 1


def test_amdahl_fits():
    # Vector intra-node: about 1% serial; Tesla: slower than one GPU, f > 1.
    assert paper.amdahl_serial_fraction(paper.VECTOR_INTRA) == pytest.approx(0.01195, abs=1e-5)
    assert paper.amdahl_serial_fraction(paper.TESLA) > 1


def test_the_paper_suite_runs_the_studys_model():
    # The preset bench sweep paper runs (bench.experiments.suites) is the study's ViT-B/16, as timm builds it.
    from bench.core import model_size, models
    from bench.experiments.suites import paper_config
    from bench.core.config import RunConfig

    cfg = paper_config(RunConfig())
    shape = model_size.shape_of(models.resolve_model(cfg.model, cfg.img_size, 10), 10)
    assert (shape.depth, shape.width, shape.heads, shape.img_size) == (paper.MODEL.depth, paper.MODEL.width,
                                                                       paper.MODEL.heads, paper.MODEL.img_size)
    # ...and of its size, counted from the shape with the study's 1000-way head ("about 86M parameters").
    study = model_size.shape_of(models.resolve_model(cfg.model, cfg.img_size, 1000), paper.MODEL.head_classes)
    assert model_size.vit_params(study) == pytest.approx(paper.MODEL.params_approx, rel=0.01)
    # The clusters' node counts and their GPU lists agree with each other.
    tesla = paper.CLUSTERS["tesla"]
    assert tesla.nodes == len(tesla.gpu_models) == paper.TESLA.gpus[-1]


def test_series_must_start_at_one_gpu():
    with pytest.raises(ValueError, match="start at 1 GPU"):
        paper.ScalingSeries(
            name="x", cluster="x", dataset=None, placement="intra-node",
            per_gpu_batch=None, gpus=(2, 4), seconds=(1.0, 0.5),
        )
