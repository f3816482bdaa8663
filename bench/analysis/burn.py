"""A node hot at once: each GPU's samples over the burn, summed up and judged against its first minute and its peers.

    from bench.analysis.burn import Sample, summarize, judge
    s = Sample(t=12.0, sm_mhz=1980, mem_mhz=2619, temp_c=61, power_w=690, power_limit_w=700, reasons=0x0,
               throughput=1520.0)                       # one sampler reading a second, the interval's images/s
    summary = summarize(samples)                        # GpuBurn: first/last minute, throttled share, clock drop...
    rows = judge({"node1:0": samples0, "node1:1": samples1, ...})
    rows[0].status, rows[0].code, rows[0].line          # 'FAIL', 'burn-throttled-alone', 'node1:3: last minute ...'

Why: each GPU alone is fine for a per-GPU run's 20 s; after minutes of all
of a node's GPUs busy together one may throttle (HW thermal, power brake)
and train slower. Per GPU: the mean throughput of the first and last
`window` seconds, the share of samples with a throttle reason active and
which (HW slowdown, HW thermal, SW thermal, power brake), the share at its
power limit (SW power cap) counted apart, the drop of the median SM clock
from the first window to the last, the peak temperature and the peak power
against the limit. SW power cap is no throttle: every H100 or A100 busy at
full load runs at its power limit and shows it (the driver holds the clocks
at what the limit allows), so it is said as "at its power limit", normal
under load. Reasons the sampler could not read (NotSupported: None) are unknown:
the shares count only the samples whose reasons were read, and a GPU with
none read says so instead of "throttled 0%". The bits are nvml.h's
(nvmlClocksEventReason*, nvmlClocksThrottleReasonHw*: NVIDIA/go-nvml @2f9e261f
gen/nvml/nvml.h). Where samples carry no throughput the SM clock stands in
for it (a compute-bound burn's rate follows its clock), and the line says so.
Judged: a GPU falls behind when its last window's throughput is below its
first by more than its noise line: max(peer_lines.FLOOR, 3 x sqrt(2) x the
relative standard error of its first window's mean); that WARNs
(burn-fell-behind: the node's cooling or power, when its peers fell as
well). It FAILs (burn-throttled-alone) when its fall exceeds the median
fall of the node's other GPUs by more than the same noise line: its peers
did not follow. A GPU alone on its node can only WARN.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bench.analysis.peer_lines import FLOOR

# The driver's clocks event reasons that mean the GPU was held back (nvml.h: HwSlowdown 0x8, SwThermalSlowdown 0x20,
# HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80); Idle 0x1, application clocks 0x2, sync boost 0x10 and
# display clock 0x100 are settings or idleness; SwPowerCap 0x4 is the power limit at work (POWER_CAP).
REASONS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
THROTTLE = sum(REASONS)
POWER_CAP = 0x4
WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class Sample:
    t: float                        # seconds since the burn started
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    reasons: int | None = None      # the clocks event reasons bitmask as the sampler gives it; None: not read (unknown)
    throughput: float | None = None  # the interval's throughput (images/s), None where not measured


@dataclass(frozen=True, slots=True)
class GpuBurn:
    first: float | None             # mean throughput (or SM clock, see by) of the first window
    last: float | None              # of the last window
    by: str                         # "throughput" or "SM clock"
    noise: float                    # the relative fall within which first and last are the same
    throttled: float | None         # share of the samples whose reasons were read with any REASONS bit set
    by_reason: dict[str, float]     # share of those samples per reason
    clock_drop: float | None        # 1 - last window's median SM clock / first window's
    peak_temp_c: float | None
    peak_power_share: float | None  # the highest power / limit seen
    n: int
    window: float = WINDOW_S        # the seconds of the first and last windows
    at_power_limit: float | None = None  # share of the samples whose reasons were read with SW power cap set
    reasons_read: int = 0           # the samples whose reasons the sampler gave

    @property
    def span(self) -> str:
        """The window in words: "minute" for 60 s, else "7 s"."""
        return "minute" if self.window == 60 else f"{self.window:.3g} s"

    @property
    def fall(self) -> float | None:
        """The relative fall from the first window to the last (positive: slower at the end)."""
        return 1 - self.last / self.first if self.first and self.last is not None else None


@dataclass(frozen=True, slots=True)
class Verdict:
    gpu: str
    status: str                     # PASS, WARN, FAIL
    code: str | None                # burn-fell-behind, burn-throttled-alone
    line: str
    summary: GpuBurn


def _mean_se(xs: list[float]) -> tuple[float | None, float]:
    if not xs:
        return None, 0.0
    m = statistics.fmean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 and m else 0.0
    return m, (se / m if m else 0.0)


def summarize(samples: list[Sample], window: float = WINDOW_S) -> GpuBurn:
    """The figures of one GPU's samples (any order; the windows are the first and last `window` seconds)."""
    ss = sorted(samples, key=lambda s: s.t)
    if not ss:
        return GpuBurn(None, None, "throughput", FLOOR, None, {}, None, None, None, 0, window)
    t0, t1 = ss[0].t, ss[-1].t
    head = [s for s in ss if s.t < t0 + window] or ss[:1]
    tail = [s for s in ss if s.t > t1 - window] or ss[-1:]
    by = "throughput" if all(s.throughput is not None for s in ss) else "SM clock"
    pick = (lambda s: s.throughput) if by == "throughput" else (lambda s: s.sm_mhz)
    first, se = _mean_se([v for s in head if (v := pick(s)) is not None])
    last, _ = _mean_se([v for s in tail if (v := pick(s)) is not None])
    noise = max(FLOOR, 3 * math.sqrt(2) * se)
    read = [s.reasons for s in ss if s.reasons is not None]
    share = {name: sum(1 for r in read if r & bit) / len(read) for bit, name in REASONS.items()} if read else {}
    throttled = sum(1 for r in read if r & THROTTLE) / len(read) if read else None
    capped = sum(1 for r in read if r & POWER_CAP) / len(read) if read else None
    clocks = [[s.sm_mhz for s in w if s.sm_mhz is not None] for w in (head, tail)]
    drop = 1 - statistics.median(clocks[1]) / statistics.median(clocks[0]) if all(clocks) else None
    temps = [s.temp_c for s in ss if s.temp_c is not None]
    powers = [s.power_w / s.power_limit_w for s in ss if s.power_w is not None and s.power_limit_w]
    return GpuBurn(first, last, by, noise, throttled, {k: v for k, v in share.items() if v}, drop,
                   max(temps) if temps else None, max(powers) if powers else None, len(ss), window, capped,
                   len(read))  # fmt: skip


def _said(gpu: str, b: GpuBurn) -> str:
    unit = "" if b.by == "throughput" else " MHz (SM clock: no throughput sampled)"
    reasons = ", ".join(f"{k} {v:.0%}" for k, v in sorted(b.by_reason.items(), key=lambda kv: -kv[1])) or "none"
    parts = [f"{gpu}: first {b.span} {b.first:.4g}{unit}, last {b.last:.4g} ({0.0 - (b.fall or 0):+.1%}, noise line "
             f"{b.noise:.1%})" if b.first is not None and b.last is not None else f"{gpu}: no figure sampled"]
    if b.throttled is None:
        if b.peak_temp_c is not None or b.clock_drop is not None:  # the sampler read this GPU, but not its reasons
            parts.append("clocks event reasons unknown (not read)")
    else:
        parts.append(f"throttled {b.throttled:.0%} of {b.reasons_read} samples ({reasons})")
    if b.at_power_limit:
        parts.append(f"at its power limit {b.at_power_limit:.0%} (SW power cap: normal under load)")
    if b.clock_drop is not None:
        parts.append(f"SM clock {0.0 - b.clock_drop:+.0%}")
    if b.peak_temp_c is not None:
        parts.append(f"peak {b.peak_temp_c:g} C")
    if b.peak_power_share is not None:
        parts.append(f"power up to {b.peak_power_share:.0%} of its limit")
    return "; ".join(parts)


def judge(gpus: dict[str, list[Sample]], window: float = WINDOW_S) -> list[Verdict]:
    """One verdict per GPU of one node (label -> its samples), in the order given."""
    sums = {g: summarize(s, window) for g, s in gpus.items()}
    out = []
    for g, b in sums.items():
        line, fall = _said(g, b), b.fall
        others = [x.fall for h, x in sums.items() if h != g and x.fall is not None]
        if fall is None or fall <= b.noise:
            out.append(Verdict(g, "PASS", None, line, b))
            continue
        if not others:
            out.append(Verdict(g, "WARN", "burn-fell-behind", f"{line}; fell behind its first {b.span}, and no "
                                                              f"other GPU of the node to tell whether it alone did", b))
            continue
        peers = statistics.median(others)
        if fall - peers > b.noise:
            out.append(Verdict(g, "FAIL", "burn-throttled-alone", f"{line}; fell behind its first {b.span} and its "
                                                                  f"{len(others)} peers did not (their median "
                                                                  f"{0.0 - peers:+.1%})", b))  # fmt: skip
        else:
            said = f"as its {len(others)} peers did (their median {0.0 - peers:+.1%}): the node's cooling or power"
            out.append(Verdict(g, "WARN", "burn-fell-behind", f"{line}; fell behind its first {b.span}, {said}", b))
    return out
