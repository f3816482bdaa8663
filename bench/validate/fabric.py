"""The fabric between leaf switches, judged where a topology says which node hangs off which leaf.

    fabric.rows(v, hosts, links, shares, t0)   # a `fabric` row per leaf and one for the cluster; held nodes

With three leaves or more, each leaf switch is a part of its pairs across
leaves (bench.validate.blame): a leaf whose looks across leaves fall short
in the share a node's would (a third WARN, two thirds FAIL), after what its
nodes themselves explain, is named: its uplinks (to the switch above it,
where the topology has one), not its nodes. Its row FAILs or WARNs and the
exit status is 1 for a FAIL; each of its nodes gets a `fabric` row that
WARNs "held" (degraded, with the switch as its action), so `--drain` takes
none of them out for a switch fault: a node that is slow inside its own
leaf is still drained by its inter-node row. An oversubscribed fabric,
where every pair across leaves is slower by the same share, is healthy:
each leaf is judged against the others, and the cluster row shows the
share as measured. With two leaves there is one path: a slow one cannot be
told from oversubscription, nor named to a side (SKIP, with the figures).
"""

from __future__ import annotations

from bench.analysis import metrics
from bench.validate.blame import Share
from bench.validate.links import rate
from bench.validate.looks import Links, switch
from bench.validate.state import CLUSTER, Validation

CHECK = "fabric"


def _above(v: Validation, leaf: str) -> str | None:
    """The switches above this leaf, where the topology names them ("spine1", "spine1, spine2")."""
    above = v.tree.above(leaf) if v.tree is not None else ()
    return ", ".join(above) or None


def _median(xs: list[float]) -> float | None:
    return metrics.percentile(xs, 50) if xs else None


def rows(v: Validation, hosts: list[str], links: Links, shares: dict[str, Share], t0: float) -> None:
    leaves = sorted({y for x in links.pairs.values() if x.across for y in x.across})
    if not leaves:
        return
    across = {leaf: [] for leaf in leaves}
    inside: dict[str, list[float]] = {leaf: [] for leaf in leaves}
    for x in links.pairs.values():
        if x.across:
            for leaf in x.across:
                across[leaf].append(x.busbw)
        elif links.leaf.get(x.pair.a) in inside:
            inside[links.leaf[x.pair.a]].append(x.busbw)
    # The fabric's share is measured on the pairs no blamed leaf explains: a slow leaf's pairs are its own row's.
    all_across = [x.busbw for x in links.pairs.values() if x.across and not links.explained(x, shares)] or \
        [x.busbw for x in links.pairs.values() if x.across]
    all_inside = [bw for xs in inside.values() for bw in xs]
    mid_across, mid_inside = _median(all_across), _median(all_inside)
    judged = len(leaves) >= 3
    for leaf in leaves:
        s = shares[switch(leaf)]
        up = _above(v, leaf)
        value = f"{rate(_median(across[leaf]))} busbw across leaves ({len(across[leaf])} pairs)" + (
            f", {rate(_median(inside[leaf]))} inside ({len(inside[leaf])} pairs)" if inside[leaf] else "")
        mine = [h for h in hosts if links.leaf.get(h) == leaf]
        nodes_blamed = [h for h in mine if shares[h].blamed is not None]
        if not judged:
            v.add(CHECK, leaf, "SKIP", value, "none", "two leaf switches: one path between them; a slow one cannot be "
                  "told from oversubscription, nor named to a side", t0=t0)
            continue
        status = s.status() if s.blamed is not None else "PASS"
        reason = f"its pairs across leaves: {s.describe()}"
        action = ""
        if status in ("WARN", "FAIL"):
            uplinks = f"switch {leaf}'s uplinks" + (f" to {up}" if up else "")
            reason += f"; {'intermittent: ' if s.intermittent() else ''}short across leaves while " + (
                f"{len(nodes_blamed)} of its {len(mine)} nodes are short inside it too: the leaf switch itself, or what "
                "its nodes share (power, cooling)" if 2 * len(nodes_blamed) > len(mine) else
                f"its nodes' own links (their pairs inside it) are not: {uplinks}, not its nodes" + (
                    f" ({', '.join(nodes_blamed)} short inside it too: judged on its own)" if nodes_blamed else ""))
            action = f"check {uplinks} (ports, cables, the other side); its nodes are held, not drained"
            for h in mine:
                v.add_node(CHECK, h, "WARN", value, leaf, f"held: on leaf switch {leaf}, whose pairs across leaves "
                           f"fall short ({leaf}'s fabric row); not drained for it: the switch, not the node",
                           t0=t0, action=f"held, not drained: {action.split(';')[0]}")
        v.add(CHECK, leaf, status, value, f"median across leaves {rate(mid_across)}", reason, t0=t0, action=action)
    ratio = f"; pairs across leaves run at {mid_across / mid_inside:.0%} of those inside (the fabric's " \
        "oversubscription as measured)" if mid_across and mid_inside else ""
    v.add(CHECK, CLUSTER, "PASS" if judged else "SKIP",
          f"{rate(mid_across)} busbw across leaves" + (f", {rate(mid_inside)} inside" if mid_inside else ""),
          f"{len(leaves)} leaf switches", f"each leaf judged against the others by its pairs across leaves{ratio}"
          if judged else f"fewer than three leaf switches: nothing to judge a leaf against{ratio}", t0=t0)
    v.figures["fabric"] = {"across": mid_across, "inside": mid_inside,
                           "leaves": {leaf: {"status": shares[switch(leaf)].status() if
                                             shares[switch(leaf)].blamed is not None else "PASS",
                                             "across": _median(across[leaf]), "inside": _median(inside[leaf])}
                                      for leaf in leaves}}
