"""The study's figures derived through bench.metrics match what it printed."""

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


def test_every_series_states_what_it_is_checked_against():
    assert paper.VECTOR_INTRA.stated_speedup == {8: 7.76}
    assert paper.VECTOR_INTER.stated_speedup == {32: 29.6}


def test_vector_intra_node_table():
    points = paper.derive(paper.VECTOR_INTRA)
    assert [p.gpus for p in points] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert points[0].speedup == 1.0 and points[0].efficiency == 1.0
    assert points[0].karp_flatt is None
    last = points[-1]
    assert last.seconds == 234.21
    assert last.speedup == 1817.65 / 234.21
    assert f"{last.efficiency:.0%}" == "97%"
    assert last.karp_flatt == pytest.approx(0.0044036, abs=1e-7)


def test_vector_inter_node_table():
    points = {p.gpus: p for p in paper.derive(paper.VECTOR_INTER)}
    assert sorted(points) == [1, 2, 4, 8, 16, 32]
    assert f"{points[32].speedup:.1f}" == "29.6"
    # The 1-GPU baseline is the CIFAR-10 figure: 2 GPUs come out superlinear.
    assert points[2].efficiency > 1 and points[2].karp_flatt < 0


def test_tesla_got_no_speedup():
    (one, five) = paper.derive(paper.TESLA)
    assert (one.seconds, five.seconds) == (712.96, 3435.96)
    assert five.speedup == pytest.approx(712.96 / 3435.96)
    assert five.speedup < 1


def test_amdahl_fits():
    # Vector intra-node: about 1% serial; Tesla: slower than one GPU, f > 1.
    assert paper.amdahl_serial_fraction(paper.VECTOR_INTRA) == pytest.approx(0.01195, abs=1e-5)
    assert paper.amdahl_serial_fraction(paper.TESLA) > 1


def test_other_stated_figures():
    assert paper.BATCH_SWEEP.stated_speedup_2gpu == {16: 1.19, 256: 1.64}
    assert paper.BATCH_SWEEP.batch_sizes == (16, 32, 64, 128, 256)
    assert paper.WEAK.stated_efficiency == {8: 0.84}
    vector, tesla = paper.COMM_SHARES["vector"], paper.COMM_SHARES["tesla"]
    assert (vector.low, vector.high) == (0.04, 0.11)
    assert tesla.low == 0.50 and tesla.high is None


def test_model_and_clusters():
    assert (paper.MODEL.depth, paper.MODEL.width, paper.MODEL.heads) == (12, 768, 12)
    assert (paper.MODEL.lr, paper.MODEL.epochs, paper.MODEL.precision) == (1e-4, 5, "fp32")
    tesla = paper.CLUSTERS["tesla"]
    assert tesla.nodes == 5 and len(tesla.gpu_models) == 5
    assert tesla.gpu_models.count("RTX 3070") == 3
    assert paper.CLUSTERS["vector"].gpus_per_node == 8
    assert paper.ARXIV_ID in paper.CITATION


def test_series_must_start_at_one_gpu():
    with pytest.raises(ValueError, match="start at 1 GPU"):
        paper.ScalingSeries(
            name="x", cluster="x", dataset=None, placement="intra-node",
            per_gpu_batch=None, gpus=(2, 4), seconds=(1.0, 0.5),
        )
