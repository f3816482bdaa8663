"""The norm of the pairs across leaf switches: the fabric's design where the user gives it (--oversubscription R:
the pairs inside a leaf over R) or the topology does (ibnetdiscover's ports), where the pairs as measured fall more
than LINK_FAIL short of it; else the fastest mode of the pairs as measured (fast). A fabric's design runs every
healthy pair across leaves alike; pairs slower than that are behind a slow part, however many: with half the
leaves behind slow uplinks, or all of them, the slow ones are not the norm.

    lines = across(values, derive, inside_lines, ratio)   # derive: values -> peer_lines.Lines (the look's noise)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from bench.analysis import metrics, peer_lines

LINK_FAIL = 0.25    # a pair a quarter slower than its peers FAILs (as below a published NIC figure: -25%)
MODE_LEAST = 0.05   # the fast mode must hold this share of the pairs across leaves to be the norm


def across(values: list[float], derive: Callable[[list[float]], peer_lines.Lines | None],
           inside: peer_lines.Lines | None, ratio: float | None) -> peer_lines.Lines | None:
    """Lines for the pairs across leaves: derive() over their fastest mode; where that mode's median is more than
    LINK_FAIL below the design (inside's median over `ratio`), the design is the norm, with the noise of the pairs
    near it (within LINK_FAIL below it, or faster); else the mode's (a fabric whose pair rounds reach 85% of its
    design, as static routing's shared uplinks may, is not called slow for it)."""
    lines = derive(fast(values))
    if ratio is None or inside is None or lines is None:
        return lines
    design = inside.median / ratio
    if lines.median >= design * (1 - LINK_FAIL):
        return dataclasses.replace(lines, how=f"{lines.how}; {lines.median / design:.0%} of the fabric's design "
                                              f"({ratio:g}:1)")
    near = derive([x for x in values if x and x >= design * (1 - LINK_FAIL)]) or lines
    return dataclasses.replace(near, median=design, how=f"the fabric's design, {ratio:g}:1 (--oversubscription): "
                               f"the pairs inside a leaf over {ratio:g}, above the fastest mode measured "
                               f"({lines.median / design:.0%} of it); {near.how}")


def fast(values: list[float]) -> list[float]:
    """The pairs of the fastest mode where the pairs across leaves fall in two, apart by more than LINK_FAIL and
    by more than 4 times the faster group's own spread (Otsu's split of the logs), the faster holding MODE_LEAST of
    them (and MIN_PEERS) at least; else all. A fabric's design runs every healthy pair across leaves alike (its
    oversubscription); pairs slower than that are behind a slow part, however many, or however few: the slower
    group may be one pair (from MIN_PEERS + 1 pairs up), and its own spread (a slow part's pairs need not be slow
    alike) does not keep it in the norm. With 3 leaves of 2 nodes at quick (5 pairs across leaves, one look each,
    one of them a host held to 6% across the uplink) the slow pair kept in the norm widened the lines past it in 8%
    of 300 seeds at a look noise of 0.30 (40% noise line to 94%+): leaf1 PASSed; split off, none of 300
    (tests/unit/test_fabric_share.py)."""
    logs = sorted(math.log(x) for x in values if x and x > 0)
    n = len(logs)
    if n < peer_lines.MIN_PEERS + 1:
        return values
    pre = [0.0]
    for x in logs:
        pre.append(pre[-1] + x)
    least = max(peer_lines.MIN_PEERS, int(MODE_LEAST * n))
    best, cut = -1.0, None
    for k in range(1, n - least + 1):
        m0, m1 = pre[k] / k, (pre[n] - pre[k]) / (n - k)
        between = k * (n - k) * (m1 - m0) ** 2
        if between > best:
            best, cut = between, k
    if cut is None:
        return values
    lo, hi = logs[:cut], logs[cut:]
    mids = [metrics.percentile(g, 50) for g in (lo, hi)]
    spread = peer_lines.MAD_TO_SIGMA * metrics.percentile([abs(x - mids[1]) for x in hi], 50)
    gap = mids[1] - mids[0]
    if gap < -math.log(1 - LINK_FAIL) or gap < 4 * spread:
        return values
    top = hi[0] - 1e-9  # in logs: exp(log(x)) may round above x
    return [x for x in values if x and x > 0 and math.log(x) >= top]
