"""Distributions of samples (step times, throughputs, bandwidths): percentiles and a summary, once.

    summary([0.11, 0.10, 0.13]).median     # 0.11
    percentile([1, 2, 3, 4], 90)           # 3.7 (linear interpolation, numpy's default)

Defined in docs/metrics.md ("Distributions"); bench.analysis.metrics re-exports them.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterator, Sequence
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


def mean_of_max_draws(pools: list[list[float]], draws: int, seed: int) -> float:
    """The mean over `draws` of the largest of one value per pool, each drawn by random.Random(seed).choice,
    pool by pool, draw by draw (bench.analysis.metrics.expected_slowest): 4,000 draws x 8,000 GPUs is 32
    million choices, 6.6 CPU seconds in a Python loop (0.5 here). Where the pools are of one length (every GPU
    measured the same steps), numpy takes the same picks from the same Mersenne Twister words: the same figure,
    bit for bit; the loop stays for the rest, and wherever that emulation does not hold for this Python."""
    if len({len(p) for p in pools}) == 1 and draws * len(pools) >= 20_000 and _emulation_holds():
        return math.fsum(_numpy_maxima(pools, draws, seed)) / draws
    rng = random.Random(seed)
    return math.fsum(max(rng.choice(p) for p in pools) for _ in range(draws)) / draws


def _picks(n: int, seed: int, block: int = 1 << 20) -> Iterator:
    """The indices random.Random(seed).choice takes from sequences of length n, in order, block by block: a
    32-bit word shifted to n's bit length, a word at n or above thrown away for the next one
    (Random._randbelow_with_getrandbits)."""
    import numpy as np

    key = random.Random(seed).getstate()[1]
    bits = np.random.MT19937()
    bits.state = {"bit_generator": "MT19937", "state": {"key": np.array(key[:-1], dtype=np.uint32), "pos": key[-1]}}
    words, shift = np.random.Generator(bits), np.uint32(32 - n.bit_length())
    while True:
        got = words.integers(0, 1 << 32, size=block, dtype=np.uint32) >> shift  # each word as it came, whole
        yield got[got < n]


def _numpy_maxima(pools: list[list[float]], draws: int, seed: int) -> list[float]:
    import numpy as np

    table, width = np.array(pools, dtype=np.float64), len(pools)
    cols, rows = np.arange(width), max(1, (1 << 20) // width)  # draws per block: not draws x pools at once
    picks, spare, out = _picks(len(pools[0]), seed), np.empty(0, dtype=np.uint32), []
    for start in range(0, draws, rows):
        need = min(rows, draws - start) * width
        parts = [spare]
        while sum(p.size for p in parts) < need:
            parts.append(next(picks))
        flat = np.concatenate(parts)
        spare = flat[need:]
        out += table[cols, flat[:need].reshape(-1, width)].max(axis=1).tolist()
    return out


@functools.cache
def _emulation_holds() -> bool:
    """Whether _picks takes what random.choice takes on this Python (its algorithm is not a documented promise)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    for n in (1, 3, 20, 37, 64):
        rng = random.Random(7)
        if list(map(int, next(_picks(n, 7, 8192))[:3000])) != [rng.choice(range(n)) for _ in range(3000)]:
            return False
    return True
