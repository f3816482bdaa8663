"""A slow loss named: a trend over a subject's last runs that no single night's line catches.

    test([1.00, 0.998, 0.995, ...])   # None (fewer than MIN_RUNS), or {"alarm", "p", "drop", "slope", "n", "s"}

The values are a GPU's (or a link's) figure in each run over that run's
median of the same kind (bench.history.write's rel): what the whole night
shared (a slow image, a busy fabric) is out, what is the subject's own stays.
A night's line judges one run against the peers; a GPU that loses 0.3% a run
stays inside it for weeks while it loses 6%.

The statistic: Mann-Kendall's S over the last WINDOW runs, S = sum over i < j
of sign(x_j - x_i), whose variance under no trend is n(n-1)(2n+5)/18 (less
t(t-1)(2t+5)/18 for each group of t equal values); z =
(S + 1) / sd for a decline (continuity corrected), p = Phi(z), one-sided. It
asks only that later runs be lower than earlier ones more often than chance,
so an outlier night moves it by at most n - 1 of its n(n-1)/2 pairs. An alarm
needs both p < ALPHA and a Theil-Sen loss (the median of the pairwise slopes,
times n - 1, over the median value) of at least MIN_DROP: significant and
large enough to act on. Under no trend and independent runs the false-alarm
rate per subject and test is at most ALPHA (1 in 10,000); runs are not quite
independent (a GPU's clocks wander over days), so the rate on real healthy
fleets is measured: benchmarks/history_drift.py, stated in benchmarks/README.md.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from statistics import NormalDist

ALPHA = 1e-4
MIN_DROP = 0.02
MIN_RUNS = 10   # fewer cannot reach ALPHA: S's largest |z| at n = 9 is 3.65 (p 1.3e-4)
WINDOW = 20
STATISTIC = (f"Mann-Kendall one-sided p < {ALPHA:g} over the last runs (at least {MIN_RUNS}, at most {WINDOW}) and "
             f"a Theil-Sen loss of at least {MIN_DROP:.0%}")


def mann_kendall(xs: list[float]) -> tuple[int, float]:
    """(S, one-sided p of a decline) of the series, in order."""
    n = len(xs)
    s = sum((xs[j] > xs[i]) - (xs[j] < xs[i]) for i in range(n) for j in range(i + 1, n))
    # Ties (a figure repeated exactly: a link measured once and reused) take their share out of the variance.
    ties = Counter(xs).values()
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties)) / 18
    if var <= 0:
        return s, 1.0
    z = (s + 1) / math.sqrt(var) if s < 0 else (s - 1) / math.sqrt(var) if s > 0 else 0.0
    return s, NormalDist().cdf(z)


def theil_sen(xs: list[float]) -> float:
    """The median of the slopes between every two runs (per run)."""
    n = len(xs)
    slopes = [(xs[j] - xs[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    return statistics.median(slopes) if slopes else 0.0


def test(values: list[float], window: int = WINDOW, alpha: float = ALPHA, min_drop: float = MIN_DROP) -> dict | None:
    """The drift test over the last `window` values (oldest first); None with fewer than MIN_RUNS."""
    xs = [x for x in values if x is not None][-window:]
    n = len(xs)
    if n < MIN_RUNS:
        return None
    s, p = mann_kendall(xs)
    slope = theil_sen(xs)
    mid = statistics.median(xs)
    drop = -slope * (n - 1) / mid if mid > 0 else 0.0
    return {"alarm": p < alpha and drop >= min_drop, "p": p, "drop": drop, "slope": slope, "n": n, "s": s}
