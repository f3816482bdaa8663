"""Every figure vitbench reports, each defined once (see docs/metrics.md).

Each function's docstring carries the same formula as its docs/metrics.md section;
the report, the comparison with the study (bench/paper.py) and the
predictions all call these, so a printed figure and a JSON figure cannot
disagree about what they mean.

Pure Python (the collectives' factors are bench.core.collectives'). Invalid input (a rank
count below 1, a non-positive time, an unknown collective) raises ValueError
naming the argument: a wrong figure is worse than none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bench.analysis.stats import Summary, _finite_list, mean_of_max_draws, percentile, summary
from bench.core import collectives

__all__ = ["Summary", "percentile", "summary"]  # distributions: bench.analysis.stats, used here too

def _positive(name: str, value: float, *, zero_ok: bool = False) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"{name}: must be a finite number {bound}, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    return _positive(name, value, zero_ok=True)


def _ranks(name: str, n: int) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {n!r}")
    return n


# --- throughput -------------------------------------------------------------


def images_per_s(images: float, seconds: float) -> float:
    """Throughput: X = images / seconds, in images/s.

    ``images`` counts every image all ranks processed in ``seconds`` of wall
    clock (global throughput); pass one rank's count for per-GPU throughput.
    """
    return _non_negative("images", images) / _positive("seconds", seconds)


def tflops(flops: float, seconds: float) -> float:
    """Achieved rate: flops / seconds / 1e12, in TFLOP/s (decimal tera)."""
    return _non_negative("flops", flops) / _positive("seconds", seconds) / 1e12


def mfu(achieved_flops_per_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: MFU = achieved / peak (a fraction, 0..1).

    ``achieved`` counts model FLOPs only (bench/flops.py: 3 x forward per
    trained image, no recomputation), so MFU is comparable across
    implementations; both rates per GPU, or both for the whole cluster.
    """
    return _non_negative("achieved_flops_per_s", achieved_flops_per_s) / _positive(
        "peak_flops_per_s", peak_flops_per_s
    )


# --- scaling ----------------------------------------------------------------


def speedup(t1: float, tn: float) -> float:
    """Speedup: S(N) = T1 / TN (times for the same work on 1 and N GPUs)."""
    return _positive("t1", t1) / _positive("tn", tn)


def efficiency(t1: float, tn: float, n: int) -> float:
    """Strong-scaling efficiency: E(N) = S(N) / N = T1 / (N * TN)."""
    return speedup(t1, tn) / _ranks("n", n)


def weak_efficiency(t1: float, tn: float) -> float:
    """Weak-scaling efficiency: E_w(N) = T1 / TN, per-GPU work held fixed.

    T1 and TN are the time per step (or per epoch) when each GPU does the
    same work at 1 and at N GPUs, so ideal weak scaling keeps TN = T1.
    """
    return _positive("t1", t1) / _positive("tn", tn)


def karp_flatt(speedup: float, n: int) -> float:
    """Karp-Flatt experimentally determined serial fraction.

    e = (1/S - 1/N) / (1 - 1/N); undefined at N = 1 (ValueError).
    e rising with N means overhead grows with N (communication); a constant
    e means a fixed serial part (Amdahl). Negative e means superlinear.
    """
    s = _positive("speedup", speedup)
    n = _ranks("n", n)
    if n == 1:
        raise ValueError("n: Karp-Flatt is undefined at n = 1")
    return (1 / s - 1 / n) / (1 - 1 / n)


def amdahl_speedup(f: float, n: int) -> float:
    """Amdahl's law: S(N) = 1 / (f + (1 - f) / N), serial fraction 0 <= f <= 1."""
    if not isinstance(f, (int, float)) or not 0 <= f <= 1:
        raise ValueError(f"f: serial fraction must be in [0, 1], got {f!r}")
    return 1 / (f + (1 - f) / _ranks("n", n))


def amdahl_fit(ns: Sequence[int], speedups: Sequence[float]) -> float:
    """Serial fraction f fitted to measured speedups, closed form.

    Amdahl is linear in f once inverted: 1/S = 1/N + f (1 - 1/N). Least
    squares on that line (residuals in 1/S, i.e. in normalised time):

        f = sum((1 - 1/N_i) (1/S_i - 1/N_i)) / sum((1 - 1/N_i)^2)

    This is the Karp-Flatt values averaged with weights (1 - 1/N)^2, exact
    when the data follow Amdahl. Points at N = 1 carry no weight; at least
    one N > 1 is needed. f is not clamped: f < 0 means superlinear speedup
    and f > 1 a slowdown below 1 GPU, neither of which Amdahl describes.
    """
    if len(ns) != len(speedups):
        raise ValueError(f"ns, speedups: lengths differ ({len(ns)} vs {len(speedups)})")
    num = den = 0.0
    for n, s in zip(ns, speedups):
        n = _ranks("ns", n)
        s = _positive("speedups", s)
        w = 1 - 1 / n
        num += w * (1 / s - 1 / n)
        den += w * w
    if den == 0:
        raise ValueError("ns: need at least one point with n > 1")
    return num / den


# --- communication ----------------------------------------------------------


def comm_share(comm_s: float, step_s: float) -> float:
    """Share of a step with a collective in flight: comm_s / step_s.

    comm_s is the union of the step's collectives' intervals (issue to
    completion), clipped to the step (bench.worker.comm_counter), so it
    cannot exceed the step: a larger one means the clocks disagree (ValueError).
    It counts waiting for the slowest rank as communication, and overlapped
    communication as in flight: an upper bound on what the step loses to it.
    """
    a = _non_negative("comm_s", comm_s)
    s = _positive("step_s", step_s)
    if a > s * (1 + 1e-9):
        raise ValueError(f"comm_s: {a} s exceeds step_s {s} s")
    return a / s


def nccl_bytes(op: str, per_rank_bytes: float, n: int) -> float:
    """The size S that nccl-tests' algbw divides by, from one rank's buffer.

    all_gather: S = sendcount * sizeof * n (the gathered output);
    reduce_scatter: S = recvcount * sizeof * n (the full input);
    all_to_all: S = the per-rank buffer size (nccl-tests' alltoall count);
    all_reduce, broadcast, reduce: S = the buffer size.
    """
    c = collectives.get(op)
    return c.nccl_bytes(_non_negative("per_rank_bytes", per_rank_bytes), _ranks("n", n))


def algbw(bytes: float, seconds: float) -> float:
    """Algorithm bandwidth: algbw = S / t, in bytes/s (see nccl_bytes for S)."""
    return _non_negative("bytes", bytes) / _positive("seconds", seconds)


def _busbw_factor(op: str, n: int) -> float:
    return collectives.get(op).busbw_factor(_ranks("n", n))


def busbw(op: str, algbw: float, n: int) -> float:
    """Bus bandwidth (nccl-tests): busbw = algbw * factor(op, n), in bytes/s.

    factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all
    (n-1)/n; broadcast, reduce 1. Comparable with a link's peak whatever n.
    """
    return _non_negative("algbw", algbw) * _busbw_factor(op, n)


def allreduce_seconds(nbytes: float, busbw_bytes_per_s: float, n: int) -> float:
    """Ideal all-reduce time at a bus bandwidth: t = S * 2(n-1)/n / busbw, s."""
    return (
        _non_negative("nbytes", nbytes)
        * _busbw_factor("all_reduce", n)
        / _positive("busbw_bytes_per_s", busbw_bytes_per_s)
    )


def compute_line_busbw(grad_bytes: float, t_compute_s: float, n: int) -> float:
    """The bus bandwidth at which one all-reduce of the gradients takes one compute step:
    B_line = S * 2(n-1)/n / t_compute, bytes/s. Below it a data-parallel step spends longer
    communicating than computing (efficiency under 50% without overlap)."""
    return _non_negative("grad_bytes", grad_bytes) * _busbw_factor("all_reduce", n) / _positive(
        "t_compute_s", t_compute_s)


def predicted_dp_efficiency(
    t_compute_s: float,
    grad_bytes: float,
    busbw_bytes_per_s: float,
    n: int,
    overlap: float = 0.0,
    t_sync_s: float | None = None,
) -> float:
    """Predicted data-parallel efficiency at N GPUs from 1-GPU measurements.

        t_comm = grad_bytes * 2(n-1)/n / busbw
        E(N)   = t_compute / (t_sync + (1 - overlap) * t_comm)

    t_sync is the expected step of the slowest of the N ranks (expected_slowest:
    a synchronous step waits for it); without step-to-step jitter it is
    t_compute (the default). Assumes a fixed per-GPU batch, one all-reduce of
    all gradients per step at the bus bandwidth measured for a message of that
    size, and a fraction ``overlap`` (0..1) of it hidden behind backward.
    Bucket latency and optimizer-step changes are not modelled.
    """
    tc = _positive("t_compute_s", t_compute_s)
    ts = tc if t_sync_s is None else _positive("t_sync_s", t_sync_s)
    if not isinstance(overlap, (int, float)) or not 0 <= overlap <= 1:
        raise ValueError(f"overlap: must be in [0, 1], got {overlap!r}")
    t_comm = allreduce_seconds(grad_bytes, busbw_bytes_per_s, n)
    return tc / (ts + (1 - overlap) * t_comm)


def expected_slowest(step_samples: Sequence[Sequence[float]], draws: int = 4000, seed: int = 0) -> float:
    """E[max over ranks of one step each]: each rank's step drawn from its own measured steps.

        t_sync = mean over d of max_r x_(r, d),  x_(r, d) drawn from rank r's steps

    A synchronous step ends when its slowest rank arrives, so a cluster whose
    ranks jitter step to step (shared cores, thermal, OS noise) steps slower
    than any rank's mean even when no rank is slow on average. Bootstrap
    (seeded: the same samples give the same figure; bench.analysis.stats.mean_of_max_draws).
    """
    pools = [_finite_list("step_samples", s) for s in step_samples]
    if not pools:
        raise ValueError("step_samples: empty")
    return mean_of_max_draws(pools, draws, seed)


# --- distributions and stragglers -------------------------------------------


def _rank_times(rank_step_times: Sequence[float] | Mapping[object, float]) -> dict[object, float]:
    items = (
        dict(rank_step_times)
        if isinstance(rank_step_times, Mapping)
        else dict(enumerate(rank_step_times))
    )
    if not items:
        raise ValueError("rank_step_times: empty")
    for rank, t in items.items():
        _positive(f"rank_step_times[{rank!r}]", t)
    return items


def straggler_cost(rank_step_times: Sequence[float] | Mapping[object, float]) -> float:
    """Fraction of cluster throughput lost to the slowest rank.

    A synchronous data-parallel step ends when the slowest rank reaches the
    all-reduce, so the cluster steps at max(t_r). Had that rank been as fast
    as the median rank, it would step at median(t_r). The loss is

        cost = 1 - median(t_r) / max(t_r)          (0 <= cost < 1)

    t_r must be each rank's own work per step (compute, excluding time spent
    waiting in collectives, or a rank's solo step time from a probe): in a
    synchronous run every rank's wall-clock step equals the slowest's.
    Accepts a list indexed by rank or a mapping rank -> seconds.
    """
    ts = list(_rank_times(rank_step_times).values())
    return 1 - percentile(ts, 50) / max(ts)


def slowest_rank(rank_step_times: Sequence[float] | Mapping[object, float]) -> object:
    """The rank (index or mapping key) with the longest step time; first on ties."""
    items = _rank_times(rank_step_times)
    return max(items, key=lambda r: items[r])


def bubble(stages: int, micro_batches: int) -> float:
    """(P-1)/(m+P-1): the share of a pipeline step each of P stages waits over m micro batches (GPipe's; the
    1F1B schedule DeepSpeed runs has the same bubble, with fewer activations in flight)."""
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"need stages >= 1 and micro batches >= 1, got {stages}, {micro_batches}")
    return (stages - 1) / (micro_batches + stages - 1)
