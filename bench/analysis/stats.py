"""Distributions of samples (step times, throughputs, bandwidths): percentiles and a summary, once.

    summary([0.11, 0.10, 0.13]).median     # 0.11
    percentile([1, 2, 3, 4], 90)           # 3.7 (linear interpolation, numpy's default)

Defined in docs/metrics.md ("Distributions"); bench.analysis.metrics re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile by linear interpolation between closest ranks.

    Sorted x_0..x_{m-1}: r = p/100 * (m - 1), result
    x_floor(r) + (r - floor(r)) * (x_ceil(r) - x_floor(r)) (numpy's default).
    """
    xs = sorted(_finite_list("values", values))
    if not 0 <= p <= 100:
        raise ValueError(f"p: must be in [0, 100], got {p!r}")
    r = p / 100 * (len(xs) - 1)
    lo = math.floor(r)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (r - lo) * (xs[hi] - xs[lo])


# Fewer samples than this and a 90th percentile is the largest sample or an interpolation next to it:
# it says nothing the max does not, so it is null with the reason (docs/metrics.md).
MIN_P90_SAMPLES = 10


@dataclass(frozen=True, slots=True)
class Summary:
    """Distribution of a list of samples (step times, throughputs, ...)."""

    n: int
    min: float
    median: float
    max: float
    mean: float
    p90: float | None
    p90_reason: str | None = None


def summary(values: Sequence[float]) -> Summary:
    """n, min, median (p50), max, mean and p90 (see percentile) of the values; p90 null below 10 samples."""
    xs = _finite_list("values", values)
    enough = len(xs) >= MIN_P90_SAMPLES
    return Summary(
        n=len(xs),
        min=min(xs),
        median=percentile(xs, 50),
        max=max(xs),
        mean=math.fsum(xs) / len(xs),
        p90=percentile(xs, 90) if enough else None,
        p90_reason=None if enough else f"{len(xs)} sample(s): a p90 needs at least {MIN_P90_SAMPLES}",
    )


def _finite_list(name: str, values: Sequence[float]) -> list[float]:
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError(f"{name}: empty")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError(f"{name}: not all finite")
    return xs
