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
    rep = _repeat_spread(rounds) * (1.0 if of <= 1 else (math.sqrt(math.pi / 2) if of >= 3 else 1.0) / math.sqrt(of))
    terms = {f"3 x the robust spread of {len(values)} peers ({spread:.1%} in log ratio)": 3 * spread,
             f"3 x sqrt(2) x the median {se_name} ({se:.1%})": 3 * math.sqrt(2) * se,
             f"3 x the median spread over repeated rounds ({rep:.1%} in log ratio" +
             (f", of a median of {of})" if of > 1 else ")"): 3 * rep,
             f"the floor {floor[0]:.0%}" + (f" ({floor[1]})" if floor[1] else ""): -math.log(1 - floor[0])}
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
    GPU's figure where its GPUs move together, as ranks sharing a host's cores do)."""
    nodes = {n: xs for n, xs in per_node.items() if len(xs) >= 2}
    floor = (max(FLOOR, gpu.noise), "as wide as its GPUs' lines") if gpu is not None else (FLOOR, "")
    lines = derive([_median(xs) for xs in nodes.values()], straggler=straggler, floor=floor)
    if lines is None:
        return None, {}
    middle = _median([x for xs in per_node.values() for x in xs])
    out = {}
    for n, xs in nodes.items():
        if max(xs) < middle and (got := judge(_median(xs), lines))[0] != "PASS":
            out[n] = got
    return lines, out
