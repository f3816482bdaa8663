"""A fabric's oversubscription by design, from ibnetdiscover's port lines: each leaf switch's ports down to HCAs
over its ports up to other switches, at each port's rate ("4xNDR": 4 lanes of 106.25 Gb/s).

    ratio, how = design(open("fabric.ibnet").read())   # 1.0, "the median of 31 leaves' ports down ... up, ..."

A leaf is a switch cabled to an HCA; its ports up are those cabled to switches that are cabled to none (a fat
tree's spines). A SHARP aggregation node (an HCA inside the switch, "Aggregation Node") is no port down. A port
whose line gives no rate counts as one port of the leaf's most common rate (all its ports alike where none has
one). The fabric's design is its median leaf's, at least 1 (more uplinks than nodes block nothing): a healthy pair
across leaves runs at 1/R of one inside a leaf; a leaf with fewer ports up than most (a cable missing or down) is
named, and its pairs are judged against the design. None where no leaf has a port up. Pure.
"""

from __future__ import annotations

import re
from collections import Counter

from bench.cluster.ibnetdiscover import _HEADER, _PORT, _switch_names

# Gb/s per lane (IBTA): what a port line's "<width>x<speed>" carries.
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.3125, "FDR": 14.0625, "EDR": 25.78125,
             "HDR": 53.125, "NDR": 106.25, "XDR": 212.5}
_RATE = re.compile(r"\b(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\s*$")


def _ports(text: str, desc: dict[str, str] | None = None) -> dict[str, list[tuple]]:
    """{switch id: [(peer id, peer description, rate Gb/s or None, port, peer's port)]} over every switch block
    (desc: each switch's description, filled in)."""
    out: dict[str, list[tuple]] = {}
    desc = {} if desc is None else desc
    current = None
    for line in text.splitlines():
        line = line.strip()
        if (h := _HEADER.match(line)) is not None:
            current = h[2] if h[1] == "Switch" else None
            if current is not None:
                out.setdefault(current, [])
                desc[current] = h[3] or ""
        elif current is not None and (p := _PORT.match(line)) is not None and p[2] != current:
            said = re.findall(r'"([^"]*)"', p[4] or "")
            r = _RATE.search(p[4] or "")
            out[current].append((p[2], said[0] if said else "", int(r[1]) * LANE_GBPS[r[2]] if r else None,
                                 int(p[1]), int(p[3])))
    return out


def _sum(rates: list[float | None], common: float) -> float:
    return sum(common if r is None else r for r in rates)


def design(text: str) -> tuple[float, str] | None:
    """(the median leaf's ports down over up by rate, at least 1; how it was read, with the leaves that have fewer
    ports up than most: cables missing or down) or None."""
    desc: dict[str, str] = {}
    ports = _ports(text, desc)
    names = _switch_names(sorted(ports), desc)
    down = {s: [r for peer, desc, r, *_ in ps if peer.startswith("H-") and "Aggregation Node" not in desc]
            for s, ps in ports.items()}
    leaves = {s for s, d in down.items() if d}
    ratios, ups = [], {}
    for s in sorted(leaves):
        up = [r for peer, _, r, *_ in ports[s] if peer.startswith("S-") and peer not in leaves]
        if not up:
            continue
        known = Counter(r for r in down[s] + up if r is not None)
        common = known.most_common(1)[0][0] if known else 1.0
        ratios.append(_sum(down[s], common) / _sum(up, common))
        ups[names[s]] = len(up)
    if not ratios:
        return None
    ratio = sorted(ratios)[len(ratios) // 2]
    most = Counter(ups.values()).most_common(1)[0][0]
    short = sorted(s for s, n in ups.items() if n < most)
    return max(1.0, ratio), (f"ibnetdiscover's ports: the median of {len(ratios)} leaves' ports down to HCAs over "
                             f"their ports up, {ratio:.2f}:1 by rate" + (
                                 f"; {len(short)} leaves have fewer than {most} ports up (cables missing or down): "
                                 + ", ".join(f"{s} {ups[s]}" for s in short[:4]) + (" ..." if len(short) > 4 else "")
                                 if short else ""))


def uplinks(text: str) -> dict[str, tuple[str, ...]]:
    """{leaf switch: its ports up, "35 to A10-P1-IBSPINE-02 port 32"}: the cables a leaf's uplinks are, where
    bench names a leaf's uplinks slow (its fabric row's action)."""
    desc: dict[str, str] = {}
    ports = _ports(text, desc)
    names = _switch_names(sorted(ports), desc)
    leaves = {s for s, ps in ports.items() if any(x[0].startswith("H-") and "Aggregation Node" not in x[1]
                                                  for x in ps)}
    return {names[s]: tuple(f"{port} to {names.get(peer, peer)} port {theirs}"
                            for peer, _, _, port, theirs in sorted(ps, key=lambda x: x[3])
                            if peer.startswith("S-") and peer not in leaves)
            for s, ps in sorted(ports.items()) if s in leaves}
