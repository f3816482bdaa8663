"""bench.metrics against hand-computed values and the study's printed figures."""

from __future__ import annotations

import math

import pytest

from bench.analysis import metrics as m

# The study's Vector strong scaling (MISSION.md), seconds per epoch.
T1 = 1817.65
T8_INTRA = 234.21
T32_INTER = 61.32


def test_images_per_s_and_tflops():
    assert m.images_per_s(6400, 32.0) == 200.0
    assert m.tflops(35.0e12, 2.0) == 17.5


def test_mfu():
    assert m.mfu(32.5e12, 65e12) == 0.5
    with pytest.raises(ValueError, match="peak_flops_per_s"):
        m.mfu(1e12, 0)


def test_vector_intra_node_speedup_and_efficiency_as_printed():
    s = m.speedup(T1, T8_INTRA)
    assert s == T1 / T8_INTRA
    assert f"{s:.2f}x" == "7.76x"
    e = m.efficiency(T1, T8_INTRA, 8)
    assert e == T1 / (8 * T8_INTRA)
    assert f"{e:.0%}" == "97%"


def test_vector_inter_node_speedup_as_printed():
    s = m.speedup(T1, T32_INTER)
    assert s == T1 / T32_INTER
    assert f"{s:.1f}x" == "29.6x"
    assert f"{m.efficiency(T1, T32_INTER, 32):.1%}" == "92.6%"


def test_weak_efficiency():
    assert m.weak_efficiency(10.0, 12.5) == 0.8
    assert m.weak_efficiency(10.0, 10.0) == 1.0


def test_karp_flatt_hand_values():
    assert m.karp_flatt(4.0, 8) == pytest.approx(1 / 7)  # (1/4 - 1/8) / (7/8)
    assert m.karp_flatt(2.0, 2) == 0.0
    assert m.karp_flatt(8.0, 8) == pytest.approx(0.0, abs=1e-15)
    assert m.karp_flatt(2.5, 2) < 0  # superlinear


def test_karp_flatt_on_the_study():
    # (234.21/1817.65 - 1/8) / (7/8) = (0.1288533 - 0.125) / 0.875
    e8 = m.karp_flatt(m.speedup(T1, T8_INTRA), 8)
    assert e8 == pytest.approx((T8_INTRA / T1 - 0.125) / 0.875, rel=1e-12)
    assert e8 == pytest.approx(0.0044036, abs=1e-7)
    # (61.32/1817.65 - 1/32) / (31/32) = (0.0337359 - 0.03125) / 0.96875
    e32 = m.karp_flatt(m.speedup(T1, T32_INTER), 32)
    assert e32 == pytest.approx(0.0025661, abs=1e-7)


def test_karp_flatt_undefined_at_one():
    with pytest.raises(ValueError, match="n = 1"):
        m.karp_flatt(1.0, 1)


def test_amdahl_speedup():
    assert m.amdahl_speedup(0.1, 10) == pytest.approx(1 / 0.19)
    assert m.amdahl_speedup(0.0, 8) == 8.0
    assert m.amdahl_speedup(1.0, 8) == 1.0
    with pytest.raises(ValueError, match="f:"):
        m.amdahl_speedup(1.5, 2)


@pytest.mark.parametrize("f", [0.0, 0.003, 0.05, 0.3])
def test_amdahl_fit_recovers_f_from_synthetic_speedups(f):
    ns = [1, 2, 4, 8, 16, 32]
    speedups = [m.amdahl_speedup(f, n) for n in ns]
    assert m.amdahl_fit(ns, speedups) == pytest.approx(f, abs=1e-12)


def test_amdahl_fit_least_squares_hand_value():
    # 1/S = 0.55 at N=2 and 0.40 at N=4:
    # f = (0.5*0.05 + 0.75*0.15) / (0.5^2 + 0.75^2) = 0.1375 / 0.8125 = 11/65
    assert m.amdahl_fit([2, 4], [1 / 0.55, 1 / 0.40]) == pytest.approx(11 / 65, rel=1e-12)


def test_amdahl_fit_needs_a_point_past_one():
    with pytest.raises(ValueError, match="n > 1"):
        m.amdahl_fit([1], [1.0])
    with pytest.raises(ValueError, match="lengths differ"):
        m.amdahl_fit([1, 2], [1.0])


def test_comm_share():
    assert m.comm_share(0.05, 0.5) == pytest.approx(0.1)
    assert m.comm_share(0.0, 0.5) == 0.0
    with pytest.raises(ValueError, match="exceeds"):
        m.comm_share(0.6, 0.5)


@pytest.mark.parametrize("n, expected", [(1, 0.0), (2, 10e9), (4, 15e9), (8, 17.5e9)])
def test_busbw_all_reduce(n, expected):
    assert m.busbw("all_reduce", 10e9, n) == pytest.approx(expected)


def test_busbw_other_collectives():
    assert m.busbw("all_gather", 10e9, 4) == pytest.approx(7.5e9)
    assert m.busbw("reduce_scatter", 10e9, 8) == pytest.approx(8.75e9)
    assert m.busbw("all_to_all", 10e9, 2) == pytest.approx(5e9)
    assert m.busbw("broadcast", 10e9, 8) == 10e9
    assert m.busbw("reduce", 10e9, 8) == 10e9
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        m.busbw("allreduce", 10e9, 8)


def test_nccl_bytes_and_algbw():
    mib = 1 << 20
    assert m.nccl_bytes("all_gather", mib, 8) == 8 * mib
    assert m.nccl_bytes("reduce_scatter", mib, 4) == 4 * mib
    assert m.nccl_bytes("all_reduce", mib, 8) == mib
    assert m.algbw(8 * mib, 0.001) == pytest.approx(8 * mib * 1000)
    # 1 GB all-reduce in 0.175 s on 8 ranks: algbw 5.714 GB/s, busbw 10 GB/s
    assert m.busbw("all_reduce", m.algbw(1e9, 0.175), 8) == pytest.approx(10e9)


def test_allreduce_seconds_inverts_busbw():
    assert m.allreduce_seconds(1e9, 10e9, 8) == pytest.approx(0.175)
    assert m.allreduce_seconds(1e9, 10e9, 1) == 0.0


def test_predicted_dp_efficiency_hand_values():
    # 1 GB of gradients at 1 GB/s busbw: t_comm = 2(n-1)/n s.
    assert m.predicted_dp_efficiency(1.0, 1e9, 1e9, 2) == pytest.approx(0.5)
    assert m.predicted_dp_efficiency(1.0, 1e9, 1e9, 4) == pytest.approx(1 / 2.5)
    assert m.predicted_dp_efficiency(1.0, 1e9, 1e9, 2, overlap=0.5) == pytest.approx(2 / 3)
    assert m.predicted_dp_efficiency(1.0, 1e9, 1e9, 2, overlap=1.0) == 1.0
    assert m.predicted_dp_efficiency(1.0, 1e9, 1e9, 1) == 1.0
    with pytest.raises(ValueError, match="overlap"):
        m.predicted_dp_efficiency(1.0, 1e9, 1e9, 2, overlap=1.5)


def test_percentile_and_summary():
    xs = [float(v) for v in range(10, 0, -1)]  # unsorted on purpose
    s = m.summary(xs)
    assert (s.n, s.min, s.median, s.max, s.mean) == (10, 1.0, 5.5, 10.0, 5.5)
    assert s.p90 == pytest.approx(9.1)  # r = 0.9 * 9 = 8.1 -> 9 + 0.1 * (10 - 9)
    assert m.percentile([3.0], 90) == 3.0
    assert m.percentile([1.0, 2.0, 3.0], 50) == 2.0
    with pytest.raises(ValueError, match="empty"):
        m.summary([])
    with pytest.raises(ValueError, match="p:"):
        m.percentile([1.0], 101)


def test_straggler_cost():
    assert m.straggler_cost([1.0, 1.0, 1.0, 2.0]) == 0.5
    assert m.straggler_cost([0.3, 0.3, 0.3]) == 0.0
    assert m.straggler_cost({"node1": 1.0, "node2": 1.0, "node5": 1.25}) == pytest.approx(0.2)
    assert m.slowest_rank({"node1": 1.0, "node5": 1.25, "node2": 1.0}) == "node5"
    assert m.slowest_rank([1.0, 3.0, 2.0]) == 1
    with pytest.raises(ValueError, match=r"rank_step_times\[1\]"):
        m.straggler_cost([1.0, 0.0])


@pytest.mark.parametrize(
    "call",
    [
        lambda: m.speedup(0.0, 1.0),
        lambda: m.speedup(1.0, -2.0),
        lambda: m.speedup(1.0, math.nan),
        lambda: m.efficiency(1.0, 1.0, 0),
        lambda: m.efficiency(1.0, 1.0, True),
        lambda: m.efficiency(1.0, 1.0, 2.0),
        lambda: m.images_per_s(10, 0),
        lambda: m.busbw("all_reduce", 1.0, 0),
        lambda: m.weak_efficiency(1.0, math.inf),
    ],
)
def test_invalid_input_raises(call):
    with pytest.raises(ValueError):
        call()


def test_p90_is_null_below_ten_samples_with_the_reason():
    few = m.summary([float(v) for v in range(1, 10)])
    assert few.p90 is None and few.p90_reason == "9 sample(s): a p90 needs at least 10"
    assert few.median == 5.0 and few.n == 9  # the rest of the summary stands


def test_a_runs_p90_counts_steps_not_steps_times_ranks():
    from bench.analysis import figures
    from tests.unit.test_mfu import _summary

    s = _summary("cpu", "cpu", "cpu")  # 4 steady steps on each of 3 ranks: 12 samples, 4 steps
    fig = figures.from_summary(s, micro_batch=64, grad_accum=1, planned_world=3, precision="fp32")
    assert fig["step_s"]["n"] == 12 and fig["step_s"]["p90"] is None
    assert fig["step_s"]["p90_reason"].startswith("4 steady step(s) (x 3 rank(s), which step together)")
    for r in s["ranks"]:
        r["step_s"] = [0.1] * 10
        r["steady_steps"] = 10
    assert figures.from_summary(s, micro_batch=64, grad_accum=1, planned_world=3,
                                precision="fp32")["step_s"]["p90"] == pytest.approx(0.1)


def test_the_run_table_says_how_many_samples_and_why_no_p90():
    from rich.console import Console

    from bench.render.run import run_table
    from tests.unit.test_compare import run

    from bench.analysis import figures
    from tests.unit.test_mfu import _summary

    rec = run(100.0)
    rec["figures"] = figures.from_summary(_summary("cpu", "cpu"), micro_batch=64, grad_accum=1, planned_world=2,
                                          precision="fp32")  # 4 steady steps on 2 ranks
    console = Console(width=300, record=True)
    console.print(run_table(rec))
    text = console.export_text()
    assert "8 samples (steady steps x ranks)" in text and "p90 null (4 steady step(s)" in text
