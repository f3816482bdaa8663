"""validate's link checks, inside each node (intra-node) and between nodes (inter-node, bench.validate.pairs).

intra-node: one all-reduce launch over every good node, each node's GPUs
in a group of their own, every node at once (one round), at the size of
the training's gradients; where a node did not PASS, one second launch of
every node again, each keeping its faster look. A node's busbw is judged,
in this order, against
  1. the published figure for its interconnect (NVSwitch/NVLink/PCIe
     generation and GPU count: bench/data, Table.link_for), else
  2. the median of the nodes with the same interconnect and GPU count, else
  3. nothing but the floor,
and always against the floor: the larger of the table's absolute floor and
the compute line (metrics.compute_line_busbw: the busbw at which one
all-reduce of the gradients takes as long as a compute step). #wrong > 0
(a value other than the exact sum arrived) is a FAIL whatever the speed.
"""

from __future__ import annotations

import time
from typing import Any

from bench.analysis import metrics
from bench.analysis.peer_lines import Lines
from bench.analysis.peer_lines import judge as judge_lines
from bench.analysis.references import judge, judge_relative
from bench.analysis.volume import comm_bytes_per_element
from bench.validate import pairing, runs
from bench.validate.gpus import pct
from bench.validate.state import Validation


def rate(bps: float) -> str:
    return f"{bps / 1e6:.3g} MB/s"


def message_size(v: Validation) -> int:
    """What the training run's all-reduce sends: the whole gradient (DeepSpeed ZeRO-0 reduces it in one bucket up
    to 5e8 elements), in bytes of the communication dtype; the level's fallback before any run said so."""
    params = v.figures.get("params")
    if not params:
        return v.level.fallback_size
    grad = params * comm_bytes_per_element(v.cfg.precision)
    return max(grad - grad % 4, 4096)


def floor(v: Validation, ranks: int) -> tuple[float | None, str]:
    """(the busbw below which a link of `ranks` ranks FAILs, what it is), or (None, why none)."""
    table_floor = v.table.busbw.floor
    if "median_step_s" not in v.derived:  # every GPU's samples, read once, not once per link (links x GPUs)
        steps = [metrics.percentile(xs, 50) for xs in (v.figures.get("gpu_step_samples") or {}).values() if xs]
        v.derived["median_step_s"] = metrics.percentile(steps, 50) if steps else None
    t_compute = v.derived["median_step_s"]
    params = v.figures.get("params")
    line = None
    if t_compute is not None and params and ranks > 1:
        line = metrics.compute_line_busbw(params * comm_bytes_per_element(v.cfg.precision), t_compute, ranks)
    if line is not None and (table_floor is None or line > table_floor):
        return line, (f"compute line {rate(line)} (one all-reduce of the gradients per {t_compute * 1e3:.1f} ms "
                      f"compute step)")
    if table_floor is not None:
        return table_floor, f"floor {rate(table_floor)} (the reference table's)"
    return None, "no floor"


def judge_link(v: Validation, busbw: float, wrong: int, ranks: int, ref, peers: list[float],
               median: float | None = None, lines: Lines | None = None) -> tuple[str, str, str]:
    """(status, reference text, reason) of one link: the published reference, else lines derived from its peers
    (bench.analysis.peer_lines: their spread and noise) where given, else its peers' median (given, where many links
    share one list of peers: 3,000 pairs against 1,000 nodes' medians each was N^2) by the table's lines, then the
    floor; #wrong always FAILs."""
    line, line_text = floor(v, ranks)
    notes = []
    if ref is not None:
        status, dev = judge(busbw, ref.busbw, ref.lower, ref.upper)
        reference = ref.label
        notes.append(f"{pct(dev)} from the published figure ({ref.source[:60]})")
    elif lines is not None:
        status, dev = judge_lines(busbw, lines)
        reference = f"median {rate(lines.median)} of {lines.n}"
        notes.append(f"{pct(dev)} from the median of its peers; {lines.describe()}")
    elif len(peers) >= 2:
        median = metrics.percentile(peers, 50) if median is None else median
        status, dev = judge_relative(busbw, median, v.table.busbw)
        reference = f"median {rate(median)} of {len(peers)}"
        notes.append(f"{pct(dev)} from the median of its peers (WARN below {pct(v.table.busbw.warn_lower)}, FAIL "
                     f"below {pct(v.table.busbw.fail_lower)}); no published figure for this link")
    elif line is not None:
        status, reference = "PASS", line_text
        notes.append("no published figure for this link and no peer to compare with: judged by the floor only")
    else:
        return "SKIP", "none", "no published figure, no peer and no floor: nothing to judge it against"
    if line is not None:
        if busbw < line:
            status = "FAIL"
            notes.insert(0, f"below the {line_text}")
        elif ref is not None or lines is not None or len(peers) >= 2:
            notes.append(f"above the {line_text}")
    if wrong:
        status = "FAIL"
        notes.insert(0, f"{wrong} wrong value(s) after all-reduce")
    return status, reference, "; ".join(notes)


def link_ref(v: Validation, scope: str, host: str):
    """The published busbw for this node's links and the GPUs it takes part with (bench.analysis.link_references)."""
    return v.table.link_for(scope, v.inventory.get(host) or {}, gpus_per_node=len(v.good_slots(host)))


def with_pairs(v: Validation, res: dict[str, list[int]], multi: dict[str, list[int]], size: int,
               with_numerics: bool = False) -> dict[str, Any]:
    """One launch for both link checks: every node's own all-reduce (one round, all nodes at once), then the
    inter-node check's rounds of pairs and the whole set, over the same ranks. The ranks' start-up is paid
    once (the larger part of a link launch on small messages); the pairs' rows wait in v.links_ahead for the
    inter-node check, which measures again only if a node left the set in between."""
    hosts = list(res)
    ranks = runs.ranks_of(res)
    groups, names, rounds = pairing.pair_groups(hosts, v.pair_schedule(hosts), len(hosts) > 2, ranks)
    base = len(groups)
    groups += [ranks[h] for h in multi]
    names += list(multi)
    rec = runs.comm(v, res, groups, names, [list(range(base, len(groups))), *rounds], [size], "links",
                    with_numerics=with_numerics)
    bw, wrong = pairing.pair_figures([r for r in rec.get("rows") or [] if r["group"] not in multi])
    v.links_ahead = {"hosts": hosts, "bw": bw, "wrong": wrong, "rec": rec}
    return rec


def first_launch(v: Validation, res: dict[str, list[int]], multi: dict[str, list[int]], size: int, stage: str,
                 with_numerics: bool = False) -> dict[str, Any]:
    """The link checks' launch: with the pairs where inter-node is asked too, else the nodes' own all-reduce."""
    if stage == "intra-node" and v.cfg.wanted("inter-node") and len(res) >= 2:
        return with_pairs(v, res, multi, size, with_numerics)
    ranks = runs.ranks_of(multi)
    return runs.comm(v, multi, [ranks[h] for h in multi], list(multi), [list(range(len(multi)))], [size], stage,
                     with_numerics=with_numerics)


def intra_with_numerics(v: Validation, res: dict[str, list[int]]) -> dict[str, Any]:
    """The numerics job run first by the link launch's ranks, where no per-GPU run precedes it (the prolog: one
    launch, one start-up, for this node's numerics and its all-reduce); the link rows wait in v.intra_ahead."""
    rec = first_launch(v, res, res, message_size(v), "intra-node", with_numerics=True)
    v.intra_ahead = {"resources": res, "rec": rec}
    return rec


def intra_node(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("intra-node")
    res = v.good_resources()
    multi = {h: s for h, s in res.items() if len(s) >= 2}
    for h in res:
        if h not in multi:
            v.add("intra-node", h, "SKIP", reason="one GPU selected on this node: no link inside it to measure",
                  host=h)
    if not multi:
        return
    size = message_size(v)

    def measure(stage: str) -> dict[str, dict[str, Any]] | None:
        ahead = v.intra_ahead
        if stage == "intra-node" and ahead is not None and ahead["resources"] == res:
            rec = ahead["rec"]  # measured with the numerics job, over the same GPUs (intra_with_numerics)
        else:
            rec = first_launch(v, res, multi, size, stage)
        if "rows" in rec:
            return {r["group"]: r for r in rec["rows"] if r["group"] in multi}
        err = rec.get("error") or {}
        for h in multi:
            v.add_node("intra-node", h, "ERROR", reason=f"could not be measured: the all-reduce run failed at "
                       f"{err.get('where')}: {err.get('reason')}", t0=t0)
        return None

    def kind(h: str) -> tuple:
        return ((v.interconnect(h).get("intra") or {}).get("kind"), len(multi[h]), v.gpu_name(h, multi[h][0]))

    def verdicts(rows: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str, str]]:
        kinds = {h: kind(h) for h in multi}
        peers: dict[tuple, list[float]] = {}  # each node's peers, gathered once: a scan per node was nodes^2
        for o in multi:
            peers.setdefault(kinds[o], []).append(rows[o]["busbw"])
        return {h: judge_link(v, rows[h]["busbw"], rows[h]["wrong"], len(multi[h]), link_ref(v, "intra", h),
                              peers[kinds[h]]) for h in multi}

    rows = measure("intra-node")
    if rows is None:
        return
    v.figures["intra_rows"] = list(rows.values())
    judged, looks = verdicts(rows), 1
    if any(j[0] != "PASS" for j in judged.values()):
        # As for GPUs and pairs: one measurement is not yet a slow link (nodes that share a switch, a noisy
        # neighbour, a clock ramping up). Every node again, at once as before, each keeping its faster look;
        # a wrong value in either look stays a FAIL.
        again = measure("intra-node-again")
        if again is None:
            return
        looks = 2
        v.figures["intra_rows_again"] = list(again.values())
        rows = {h: {**max(rows[h], again[h], key=lambda r: r["busbw"]), "wrong": rows[h]["wrong"] + again[h]["wrong"]}
                for h in multi}
        judged = verdicts(rows)
    for h in multi:
        r = rows[h]
        v.figures["intra_busbw"][h] = r["busbw"]
        status, reference, reason = judged[h]
        what = (v.interconnect(h).get("intra") or {}).get("kind") or "unknown"
        v.add_node("intra-node", h, status, f"{rate(r['busbw'])} busbw, {len(multi[h])} GPUs ({what})"
                   + (" (faster of 2 looks)" if looks == 2 else ""), reference,
                   f"all-reduce of {size} B over the node's GPUs, every node at once; {reason}; #wrong {r['wrong']}",
                   t0=t0, figure=r["busbw"])
