"""The lines a GPU's figure is judged by against its peers, derived from what was measured, not set once for all.

    lines = derive([156.0, 151.0, 160.0, 34.0, 158.0, 149.0], ses=[0.01] * 6)
    judge(34.0, lines)     # ("FAIL", -0.78): slower than the noise allows and costing the job over the line

Identical datacentre GPUs agree within a few percent, CPU ranks on shared
cores within tens: one pair of fixed lines cannot serve both. Here, from the
figures of the GPUs of one model (at least MIN_PEERS of them), each taken as
its log ratio to the median (a speed is a rate: twice as slow and twice as
fast are the same distance, and no spread puts a line below zero speed):
  width = max(3 x the robust spread of the peers (1.4826 x the median
              absolute deviation of their log ratios), 3 x sqrt(2) x the
              median GPU's relative standard error of its mean step (what
              one figure moves run to run), 3 x the median GPU's spread
              over repeated rounds (each round against its own median: a
              load that moves every GPU together cancels; where each figure
              is the median of N rounds, that spread x sqrt(pi/2) / sqrt(N)),
              the floor's (FLOOR, or the
              caller's where its figures' clock moves more: bench.analysis.copies))
  noise = 1 - exp(-width): the shortfall, as a share of the median, that
          is `width` below it; for small widths the two are the same
          (a 3% width is a 2.96% line), for wide ones the line stays
          below 100% (a 0.9 width, CPU ranks spread 30% on two cores, is
          59%, where a linear line would be 90% and pass a GPU at a tenth
          of its peers' speed)
  fail  = max(noise, the straggler line): one GPU slower by a share s holds
          a data-parallel job to about 1 - s of its speed, so a GPU slower
          than the straggler line (bench.validate.gpus) costs the job more
          than bench calls acceptable, and stays in service only if that
          shortfall is within the noise, where it cannot be told from luck.
A figure below the median by more than `fail` FAILs, by more than `noise`
(and less than `fail`) WARNs, else PASSes. Fewer peers: None, and the
caller judges by the reference table's fixed lines. whole_nodes() judges the
nodes every GPU of which is slow as nodes, by the same lines over the nodes'
median GPUs. docs/metrics.md, "per-GPU lines", defines the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.analysis.metrics import percentile

MIN_PEERS = 3       # the median and a spread need three figures; two cannot tell which one is off
FLOOR = 0.02        # below 2% no two runs of the same GPU agree (clocks, boost, the host)
MAD_TO_SIGMA = 1.4826  # the median absolute deviation of a normal sample times this is its standard deviation
# The chance that a healthy figure falls past its noise line: a normal's below -3 standard deviations, the rate the
# 3 x spread lines assume and that --repeats' lines (median_tail) are drawn at from the rounds' own noise.
ALPHA = 0.5 * math.erfc(3 / math.sqrt(2))


@dataclass(frozen=True, slots=True)
class Lines:
    median: float
    noise: float        # a shortfall within this is noise (a share of the median, below 1)
    fail: float         # a shortfall beyond this FAILs
    n: int              # how many figures the lines come from
    how: str            # one line: which term set the noise, and the straggler line

    def describe(self) -> str:
        warn = f"WARN below -{self.noise:.0%}, " if self.fail > self.noise else ""
        return f"{warn}FAIL below -{self.fail:.0%} ({self.how})"


def _median(xs: list[float]) -> float:
    return percentile(sorted(xs), 50)


def derive(values: list[float], ses: list[float] = (), rounds: list[list[float]] = (),
           straggler: float = 0.10, se_name: str = "relative standard error of a mean step",
           floor: tuple[float, str] = (FLOOR, ""), of: int = 1) -> Lines | None:
    """Lines for the figures of one model's GPUs (higher is better). ses: each figure's own noise, relative (a
    GPU's standard error of its mean step; se_name says what it is); rounds: each GPU's figures over repeated
    rounds, in the same round order for all; floor: the least noise and why, where a figure's clock is known to
    move more than a GPU's (FLOOR, otherwise); of: each figure is the median of this many rounds (--repeats), whose
    run-to-run spread is that of one round over sqrt(of) (x sqrt(pi/2) from 3 rounds on: a median's)."""
    values = [x for x in values if x and math.isfinite(x) and x > 0]
    if len(values) < MIN_PEERS:
        return None
    med = _median(values)
    logs = [math.log(x / med) for x in values]
    centre = _median(logs)
    spread = MAD_TO_SIGMA * _median([abs(d - centre) for d in logs])
    se = _median(list(ses)) if ses else 0.0
    terms = {f"3 x the robust spread of {len(values)} peers ({spread:.1%} in log ratio)": 3 * spread,
             f"3 x sqrt(2) x the median {se_name} ({se:.1%})": 3 * math.sqrt(2) * se,
             f"the floor {floor[0]:.0%}" + (f" ({floor[1]})" if floor[1] else ""): -math.log(1 - floor[0])}
    tail = median_tail(rounds, spread) if of >= 3 else None
    if tail is not None:
        # --repeats 3 or more: each figure is a median of rounds; where a healthy one falls ALPHA of the time,
        # from the rounds' own residuals (their shape, not a normal's) and the peers' spread beyond them.
        width, between, pool = tail
        terms = {f"where a healthy median of {of} rounds falls {ALPHA * 1000:.2f} in 1,000: the peers' spread "
                 f"beyond the rounds' noise ({between:.1%}) plus the median of {of} of {pool} round-to-round "
                 "residuals": width, **{k: x for k, x in terms.items() if not k.startswith("3 x the robust")}}
    else:
        rep = _repeat_spread(rounds) * (1.0 if of <= 1 else (math.sqrt(math.pi / 2) if of >= 3 else 1.0) /
                                        math.sqrt(of))
        terms[f"3 x the median spread over repeated rounds ({rep:.1%} in log ratio" +
              (f", of a median of {of})" if of > 1 else ")")] = 3 * rep
    why, width = max(terms.items(), key=lambda kv: kv[1])
    noise = 1 - math.exp(-width)
    fail = max(noise, straggler)
    how = (f"noise {noise:.0%} = 1 - exp(-{width:.2f}), {why}; " +
           (f"the straggler line {straggler:.0%} is within it" if noise >= straggler else
            f"FAIL at the straggler line {straggler:.0%}: slower costs the job more"))
    return Lines(med, noise, fail, len(values), how)


def _repeat_spread(rounds: list[list[float]]) -> float:
    """The median GPU's standard deviation over rounds of the log of its figure relative to each round's median."""
    rounds = [r for r in rounds if len(r) >= 2]
    if not rounds or len({len(r) for r in rounds}) != 1:
        return 0.0
    k = len(rounds[0])
    medians = [_median([r[i] for r in rounds if r[i]]) for i in range(k)]
    spreads = []
    for r in rounds:
        rel = [math.log(x / m) for x, m in zip(r, medians) if x and m and x > 0 and m > 0]
        if len(rel) >= 2:
            mean = sum(rel) / len(rel)
            spreads.append(math.sqrt(sum((x - mean) ** 2 for x in rel) / (len(rel) - 1)))
    return _median(spreads) if spreads else 0.0


def _residuals(rounds: list[list[float]]) -> list[list[float]]:
    """Each GPU's log figure in each round against that round's median (a load that moves every GPU cancels)."""
    rounds = [r for r in rounds if len(r) >= 2 and all(x and x > 0 for x in r)]
    if not rounds or len({len(r) for r in rounds}) != 1:
        return []
    k = len(rounds[0])
    medians = [_median([r[i] for r in rounds]) for i in range(k)]
    return [[math.log(x / m) for x, m in zip(r, medians)] for r in rounds]


def median_tail(rounds: list[list[float]], spread: float, alpha: float = None) -> tuple[float, float, int] | None:
    """(width, the peers' spread beyond the rounds' noise, how many residuals) of the line a healthy figure that is
    the median of its N rounds falls below with probability alpha (ALPHA), or None with fewer than MIN_PEERS GPUs
    of N >= 2 rounds. The round-to-round noise is the rounds' own: every difference between two rounds of one GPU
    (each against its round's median) over sqrt(2), pooled over the peers, which keeps its shape (real fleets'
    rounds are bimodal and heavy-tailed: a normal of the same spread puts the line too close); the median of N
    draws from that pool has an exact distribution (order statistics); the GPUs' own speeds spread normally by
    what the peers' robust spread (`spread`, over the medians) has beyond that median's. The line is where their
    sum has alpha below it."""
    alpha = ALPHA if alpha is None else alpha
    res = _residuals(rounds)
    if len(res) < MIN_PEERS:
        return None
    n = len(res[0])
    pool = sorted((r[i] - r[j]) / math.sqrt(2) for r in res for i in range(n) for j in range(n) if i != j)
    m = len(pool)
    need = n // 2 + 1  # the median bench takes (the sorted figures' [n // 2]) is at or below v when this many are
    cdf = [sum(math.comb(n, j) * f ** j * (1 - f) ** (n - j) for j in range(need, n + 1))
           for f in ((c + 1) / m for c in range(m))]
    probs = [b - a for a, b in zip([0.0] + cdf, cdf)]
    quart = [pool[min(next(i for i, c in enumerate(cdf) if c >= q), m - 1)] for q in (0.25, 0.75)]
    between = math.sqrt(max(0.0, spread ** 2 - ((quart[1] - quart[0]) / 1.349) ** 2))  # 1.349: a normal's IQR/sigma
    support = [(v, p) for v, p in zip(pool, probs) if p > 1e-12]

    def below(w: float) -> float:
        if between <= 0:
            return sum(p for v, p in support if v < -w)
        return sum(p * 0.5 * math.erfc((w + v) / between / math.sqrt(2)) for v, p in support)

    lo, hi = 0.0, 3.0
    for _ in range(40):
        lo, hi = (lo, (lo + hi) / 2) if below((lo + hi) / 2) <= alpha else ((lo + hi) / 2, hi)
    return hi, between, m


def judge(value: float, lines: Lines) -> tuple[str, float]:
    """(status, deviation from the median)."""
    dev = value / lines.median - 1
    if dev < -lines.fail:
        return "FAIL", dev
    if dev < -lines.noise:
        return "WARN", dev
    return "PASS", dev


def whole_nodes(per_node: dict[str, list[float]], straggler: float = 0.10,
                gpu: Lines | None = None) -> tuple[Lines | None, dict[str, tuple]]:
    """The nodes every GPU of which is slower than the median GPU, judged as nodes: (the lines of the nodes'
    median GPUs, {node: (status, deviation)} for each such node that does not PASS). A node's GPUs share its
    cooling, power, host and PCIe switches, so a node whose every GPU is a few percent slow is one fault, which
    its median GPU shows: lines drawn over the nodes' medians (derive), at least MIN_PEERS nodes of two GPUs or
    more, and never narrower than the lines its GPUs are judged by (`gpu`: a node's median moves as much as one
    GPU's figure where its GPUs move together, as ranks sharing a host's cores do). Every GPU, not the median
    alone: the node's fastest GPU must fall past the WARN line too (its median then gives the verdict). Of two GPUs
    the median is their mean: one GPU far below beside a healthy partner made a whole-node FAIL of one
    GPU's fault (a CPU rank at 8% of a core, the other at its peers' rate: the node's median 63% down)."""
    nodes = {n: xs for n, xs in per_node.items() if len(xs) >= 2}
    floor = (max(FLOOR, gpu.noise), "as wide as its GPUs' lines") if gpu is not None else (FLOOR, "")
    lines = derive([_median(xs) for xs in nodes.values()], straggler=straggler, floor=floor)
    if lines is None:
        return None, {}
    middle = _median([x for xs in per_node.values() for x in xs])
    out = {}
    for n, xs in nodes.items():
        every = max(xs) < middle and judge(max(xs), lines)[0] != "PASS"
        if every and (got := judge(_median(xs), lines))[0] != "PASS":
            out[n] = got
    return lines, out
