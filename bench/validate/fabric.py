"""The fabric between leaf switches, judged where a topology says which node hangs off which leaf.

    fabric.rows(v, hosts, links, shares, t0)   # a `fabric` row per leaf, per slow path, and one for the cluster

With three leaves or more, the looks across leaves that no blamed node
explains are the fabric's (bench.validate.above says which part each short
one belongs to). Each part found slow gets a row that FAILs (WARNs where its
looks only WARNed), and its nodes get a `fabric` row that WARNs "held"
(degraded, with the part as its action), so `--drain` takes none of them out
for a fabric fault: a node slow inside its own leaf is still drained by its
inter-node row. The parts:
  a leaf's uplinks      the leaf's row; every node of it held;
  one uplink of a leaf  the leaf's row names the nodes behind it (static
                        routing: they share its looks), only they held;
  a leaf pair's path    a row "leafA-leafB"; nothing held;
  above the leaves      more than PATHS_MOST leaf pairs over three leaves or
                        more: the cluster's row names the fabric above those
                        leaves (a spine, or its links); nothing held;
  a node not placed     short across what may be other leaves: held, named
                        as unplaced, never drained (its row is inter-node's).
An oversubscribed fabric, where every pair across leaves is slower by the
same share, is healthy: the norm across leaves is the pairs' fastest mode
(bench.validate.looks), and the cluster row shows the share as measured.
With two leaves there is one path: a slow one cannot be told from
oversubscription, nor named to a side (SKIP, with the figures).
"""

from __future__ import annotations

from collections import Counter

from bench.analysis import metrics
from bench.validate import islands
from bench.validate.above import Part
from bench.validate.blame import Share
from bench.validate.links import rate
from bench.validate.looks import Links
from bench.validate.state import CLUSTER, Validation

CHECK = "fabric"
PATHS_MOST = 3     # more slow leaf pairs than this, over three leaves or more: the fabric above them, not paths
MOST_OF_LEAF = 3 / 4   # this share of a leaf's nodes short across it: its uplinks, not one of them


def _above(v: Validation, leaf: str) -> str | None:
    """The switches above this leaf, where the topology names them ("spine1", "spine1, spine2")."""
    above = v.tree.above(leaf) if v.tree is not None else ()
    return ", ".join(above) or None


def _median(xs: list[float]) -> float | None:
    return metrics.percentile(xs, 50) if xs else None


def _status(p: Part) -> str:
    return "FAIL" if p.failed * 3 >= p.looks * 2 else "WARN"


def _looks(p: Part) -> str:
    return f"{p.short} of {p.looks} look(s) short ({p.failed} FAIL)"


def _some(xs: list[str], most: int = 8) -> str:
    return ", ".join(xs[:most]) + (f" and {len(xs) - most} more" if len(xs) > most else "")


def _hold(v: Validation, hosts: list[str], value: str, part: str, why: str, action: str, t0: float) -> None:
    for h in hosts:
        v.add_node(CHECK, h, "WARN", value, part, f"held: {why}; not drained for it: the fabric, not the node",
                   t0=t0, action=f"held, not drained: {action}")


def rows(v: Validation, hosts: list[str], links: Links, shares: dict[str, Share], t0: float) -> None:
    leaves = sorted({y for x in links.pairs.values() if x.across for y in x.across})
    if not leaves:
        if not links.topology:
            _islands(v, links, t0)
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
    parts = links.above if judged else []
    ups: dict[str | None, list[Part]] = {}
    for p in parts:
        if p.kind == "up":
            ups.setdefault(links.leaf.get(p.key), []).append(p)
    bad_leaves = {p.key: p for p in parts if p.kind == "leaf"}
    for leaf in leaves:
        up = _above(v, leaf)
        value = f"{rate(_median(across[leaf]))} busbw across leaves ({len(across[leaf])} pairs)" + (
            f", {rate(_median(inside[leaf]))} inside ({len(inside[leaf])} pairs)" if inside[leaf] else "")
        mine = [h for h in hosts if links.leaf.get(h) == leaf]
        nodes_blamed = [h for h in mine if shares[h].blamed is not None]
        if not judged:
            v.add(CHECK, leaf, "SKIP", value, "none", "two leaf switches: one path between them; a slow one cannot be "
                  "told from oversubscription, nor named to a side", t0=t0)
            continue
        uplinks = f"switch {leaf}'s uplinks" + (f" to {up}" if up else "")
        group = ups.get(leaf, [])
        part = bad_leaves.get(leaf)
        whole = part is not None or len(group) >= MOST_OF_LEAF * max(1, len(mine) - len(nodes_blamed))
        status, reason, action = "PASS", "its pairs across leaves: none short past what its nodes explain", ""
        if part is not None or group:
            looks = part if part is not None else Part("up", leaf, sum(p.looks for p in group),
                                                       sum(p.short for p in group), sum(p.failed for p in group))
            status = _status(looks)
            inside_too = (f" ({', '.join(nodes_blamed)} short inside it too: judged on its own)" if nodes_blamed
                          else "")
            if whole:
                held = [h for h in mine if shares[h].blamed is None]
                reason = (f"its pairs across leaves: {_looks(looks)}, whatever the partner leaf, while its nodes' own "
                          f"links (their pairs inside it) are not: {uplinks}, not its nodes{inside_too}")
                reason += _cables_short(v, leaf)
                action = f"check {uplinks} ({_cables(v, leaf)}); its nodes are held, not drained"
            else:
                held = sorted(p.key for p in group)
                reason = (f"{len(held)} of its {len(mine)} nodes ({_some(held)}) are short across leaves whatever the "
                          f"partner ({_looks(looks)}) while their pairs inside it are not, and its other nodes' "
                          f"looks across leaves pass: the uplink(s) of {leaf} these nodes route through (static "
                          f"routing: the nodes behind one uplink share its looks), not the nodes{inside_too}")
                reason += _cables_short(v, leaf)
                action = (f"check the uplink(s) of switch {leaf}" + (f" to {up}" if up else "") +
                          f" that {len(held)} of its nodes route through ({_cables(v, leaf)}"
                          f"{_which_one(v, leaf)}); they are held, not drained")
            _hold(v, held, value, leaf, f"on leaf switch {leaf}, whose pairs across leaves fall short ({leaf}'s "
                  "fabric row)", action.split(";")[0], t0)
        if status == "PASS" and part is None and not group:
            status, reason, action = _untold(links, leaf, bad_leaves, status, reason, action)
        if status == "PASS" and len(mine) >= 3 and 2 * len(nodes_blamed) > len(mine):
            status = "WARN"
            reason = (f"{len(nodes_blamed)} of its {len(mine)} nodes are short inside it: the leaf switch itself, or "
                      "what its nodes share (power, cooling); each judged on its own row")
            action = f"check switch {leaf} itself"
        v.add(CHECK, leaf, status, value, f"median across leaves {rate(mid_across)}", reason, t0=t0, action=action)
    _unplaced(v, ups.get(None, []), t0)
    pairs = [p for p in parts if p.kind == "pair"]
    touched = sorted({leaf for p in pairs for leaf in p.key})
    spread = len(pairs) > PATHS_MOST and len(touched) >= 3
    if not spread:
        for p in pairs:
            a, b = sorted(p.key)
            node, towards = _one_node(links, a, b)
            who = (f"; every short look is {node}'s with {towards} while the path's other pairs pass: {node}'s way "
                   f"towards {towards}, or the path" if node else "")
            v.add(CHECK, f"{a}-{b}", _status(p), f"{_looks(p)} between {a} and {b}", f"median across leaves "
                  f"{rate(mid_across)}", f"the pairs between {a} and {b} are short ({_looks(p)}) while each leaf's "
                  "pairs with the others are not: the path between them (the spine their traffic is routed through, "
                  f"or its links to them){who}", t0=t0,
                  action=f"check the path between switches {a} and {b}" + (f" and {node}'s route" if node else ""))
    design = v.cfg.oversubscription
    ratio = (f"; pairs across leaves run at {mid_across / mid_inside:.0%} of those inside (the fabric's "
             "oversubscription as measured" + (f"; its design {design:g}:1, {1 / design:.0%}, --oversubscription"
                                               if design else "") + ")") if mid_across and mid_inside else ""
    if spread:
        looks = Part("pair", None, sum(p.looks for p in pairs), sum(p.short for p in pairs),
                     sum(p.failed for p in pairs))
        measured = len({frozenset(x.across) for x in links.pairs.values() if x.across})
        v.add(CHECK, CLUSTER, _status(looks), f"{len(pairs)} of {measured} leaf pairs measured short",
              f"{len(leaves)} leaf switches", f"the fabric above leaves {_some(touched)}: their short looks follow "
              f"leaf pairs ({_looks(looks)}), not leaves nor nodes (each leaf's pairs with other leaves pass): a "
              "spine, or the links of one" + (f" ({_above(v, touched[0])})" if _above(v, touched[0]) else "") +
              f"; no node held for it{ratio}", t0=t0,
              action="check the spines above these leaves (their ports and cables); no node is at fault")
    else:
        v.add(CHECK, CLUSTER, "PASS" if judged else "SKIP",
              f"{rate(mid_across)} busbw across leaves" + (f", {rate(mid_inside)} inside" if mid_inside else ""),
              f"{len(leaves)} leaf switches", f"each leaf judged against the others by its pairs across leaves{ratio}"
              if judged else f"fewer than three leaf switches: nothing to judge a leaf against{ratio}", t0=t0)
    v.figures["fabric"] = {"across": mid_across, "inside": mid_inside,
                           "parts": [{"kind": p.kind, "part": sorted(p.key) if isinstance(p.key, frozenset) else p.key,
                                      "looks": p.looks, "short": p.short} for p in parts],
                           "leaves": {leaf: {"across": _median(across[leaf]), "inside": _median(inside[leaf])}
                                      for leaf in leaves}}


def _islands(v: Validation, links: Links, t0: float) -> None:
    """Without a topology, nodes in islands (bench.validate.islands): the cluster's fabric row WARNs naming them, no
    node held; nothing where the pairs do not split along a cut."""
    found = islands.find({k: x.busbw for k, x in links.pairs.items()})
    if found is None:
        return
    groups, ratio, slow = found
    names = " | ".join(_some(g, 6) for g in groups)
    v.add(CHECK, CLUSTER, "WARN", f"{slow} of {len(links.pairs)} pairs at {ratio:.0%} of the others",
          f"{len(groups)} islands of {', '.join(str(len(g)) for g in groups)} nodes",
          f"the nodes fall in islands ({names}): every pair inside each runs in the pairs' fast mode and every pair "
          f"between them at {ratio:.0%} of it, so the slow pairs follow a cut, not a node: leaf switches under a "
          f"fabric oversubscribed {1 / ratio:.1f}:1, or the path between these groups slow; without a topology "
          "bench cannot tell which (no node held for it)", t0=t0,
          action="give --topology (and --oversubscription where the fabric is built oversubscribed) to judge the "
                 "path between these groups")


def _cables(v: Validation, leaf: str, most: int = 6) -> str:
    """The leaf's ports up as the topology names them (ibnetdiscover's: "port 35 to spine-02 port 9"), else what
    to look at."""
    ports = v.tree.uplinks.get(leaf, ()) if v.tree is not None else ()
    if not ports:
        return "ports, cables, the other side"
    return f"its {len(ports)} ports up: " + ", ".join(ports[:most]) + (f" and {len(ports) - most} more"
                                                                        if len(ports) > most else "")


def _which_one(v: Validation, leaf: str) -> str:
    """What tells which of a leaf's ports up a group of its nodes routes through: the leaf's forwarding table, which
    no topology bench reads holds (ibnetdiscover gives the cables, not the routes)."""
    ports = v.tree.uplinks.get(leaf, ()) if v.tree is not None else ()
    if len(ports) < 2:
        return ""
    return (f"; which of the {len(ports)}: the leaf's forwarding table (`ibroute` on its LID: the port each node's "
            "LID leaves by) tells, the topology does not")


def _cables_short(v: Validation, leaf: str) -> str:
    """"; it has 14 ports up where most leaves have 18" where the topology counts fewer for it than for most."""
    ups = v.tree.uplinks if v.tree is not None else {}
    if leaf not in ups or len(ups) < 3:
        return ""
    most = Counter(len(p) for p in ups.values()).most_common(1)[0][0]
    n = len(ups[leaf])
    return f"; it has {n} ports up where most leaves have {most} (cables missing or down)" if n < most else ""


def _untold(links, leaf: str, bad: dict, status: str, reason: str, action: str) -> tuple[str, str, str]:
    """A leaf not found slow whose every pair across leaves is short and crossed a leaf that was (every leaf slow,
    or all but one): its own uplinks cannot be told apart (WARN, its nodes not held), else as it was."""
    mine = [x for x in links.pairs.values() if x.across and leaf in x.across]
    if not mine or not all(x.short() and (set(x.across) - {leaf}) & set(bad) for x in mine):
        return status, reason, action
    return ("WARN", f"every one of its {len(mine)} pairs across leaves is short and crossed a leaf switch found slow: "
            "whether its own uplinks are slow too cannot be told (its nodes are not held)",
            f"check switch {leaf}'s uplinks with the slow leaves'")


def _one_node(links, a: str, b: str) -> tuple[str | None, str | None]:
    """(the node in every short pair between leaves a and b, the other leaf) where the path's other pairs pass: a
    node slow only towards one leaf (its route there), which the path's looks cannot tell from the path."""
    on = [x for x in links.pairs.values() if x.across and set(x.across) == {a, b}]
    short = [x for x in on if x.short()]
    common = set.intersection(*(set(x.pair.key) for x in short)) if short else set()
    if len(common) != 1 or not any(not x.short() for x in on):
        return None, None
    node = next(iter(common))
    return node, b if links.leaf.get(node) == a else a


def _unplaced(v: Validation, parts: list[Part], t0: float) -> None:
    """Nodes the topology does not place, short across what may be other leaves: held and named, never drained."""
    for p in parts:
        v.add_node(CHECK, p.key, "WARN", f"{_looks(p)} with nodes of other leaves, or of its own", "unplaced",
                   f"held: the topology does not place {p.key}, and its short looks ({_looks(p)}) are all with "
                   "partners it may reach across leaves: its own link cannot be told from the path above it; "
                   "not drained for it", t0=t0, action="held, not drained: place it in the topology, then validate "
                   "again")
