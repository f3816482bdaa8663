"""validate's throughput check: every GPU of every node trains alone, all at once, and is judged on its own.

One launch covers every selected slot of every good node (bench.jobs.alone:
one rank per GPU, a world of one each, no communication), so each node
carries the load training puts on it, and each GPU's figure is its own:
    X = micro batch / median steady step time          (docs/metrics.md, per-GPU throughput)
judged against the published reference for its GPU model, precision,
model and micro batch when there is one, else against the median of the
GPUs of the same model in the cluster (the "relative" tolerances), else
SKIP: nothing to judge it against. A node's row sums its GPUs and names
the slowest; it is a summary (its GPUs' rows carry the verdicts and drain).
"""

from __future__ import annotations

import dataclasses
import time

from bench.analysis import metrics, peer_lines
from bench.analysis.peer_lines import Lines
from bench.analysis.references import judge, judge_relative
from bench.validate.gpu_rounds import STRAGGLER_WARN, chosen, relative_se, straggler_line, take  # noqa: F401
from bench.validate.state import RANK, Validation

_ORDER = RANK


def pct(x: float) -> str:
    return f"{x:+.0%}"


def judge_both(value: float, ref: tuple[float, float | None, float | None, str, str] | None, peers: list[float],
               tol, fmt, lines: Lines | None = None) -> tuple[str, str, str] | None:
    """(status, reference text, reason) of a figure against its published reference (value, lower, upper,
    label, source) when there is one and its peers when there are two or more: the worse verdict of the two (a
    GPU inside the published tolerance can still be the slow one of its kind); None when neither exists. The
    peers judge by `lines` derived from what was measured (bench.analysis.peer_lines) where there are enough of
    them, else by the table's fixed lines (tol)."""
    verdicts, refs, reasons = [], [], []
    if ref is not None:
        status, dev = judge(value, ref[0], ref[1], ref[2])
        verdicts.append(status)
        refs.append(ref[3])
        reasons.append(f"{pct(dev)} from the published figure (tolerance {ref[1]}..{ref[2]}); {ref[4][:80]}")
    if lines is not None:
        status, dev = peer_lines.judge(value, lines)
        verdicts.append(status)
        refs.append(f"median of {lines.n} {fmt(lines.median)}")
        reasons.append(f"{pct(dev)} from the median of its model; {lines.describe()}")
    elif len(peers) >= 2:
        median = metrics.percentile(peers, 50)
        status, dev = judge_relative(value, median, tol)
        verdicts.append(status)
        refs.append(f"median of {len(peers)} {fmt(median)}")
        reasons.append(f"{pct(dev)} from the median of its model (the table's fixed lines: WARN below "
                       f"{pct(tol.warn_lower)}, FAIL below {pct(tol.fail_lower)}; {len(peers)} GPUs are too few to "
                       "derive lines from)")
    if not verdicts:
        return None
    return max(verdicts, key=_ORDER.__getitem__), "; ".join(refs), "; ".join(reasons)


def model_lines(v: Validation, figures: dict[tuple[str, int], float], ses: dict[tuple[str, int], float],
                rounds: dict[tuple[str, int], list[float]], of: int = 1) -> dict[str, Lines | None]:
    """Per GPU model, the lines its GPUs are judged by (bench.analysis.peer_lines), from this round's figures (of:
    each the median of that many rounds)."""
    out: dict[str, Lines | None] = {}
    for name in {v.gpu_name(*k) for k in figures}:
        keys = [k for k in figures if v.gpu_name(*k) == name]
        out[name] = peer_lines.derive([figures[k] for k in keys], [ses[k] for k in keys if k in ses],
                                      [rounds[k] for k in keys if k in rounds], straggler=STRAGGLER_WARN, of=of)
    return out


def by_model(v: Validation, figures: dict[tuple[str, int], float]) -> dict[str, list[float]]:
    """Every GPU's figure of one round, per GPU model, in the round's order: each GPU's peers, gathered once for
    the round (a scan per GPU was GPUs^2)."""
    out: dict[str, list[float]] = {}
    for k, x in figures.items():
        out.setdefault(v.gpu_name(*k), []).append(x)
    return out


def judge_gpu(v: Validation, key: tuple[str, int], ips: float, peers: dict[str, list[float]],
              lines: dict[str, Lines | None]) -> tuple:
    """(status, reference text, reason) of one GPU's images/s; peers: every GPU's figure in the same round, per
    model (by_model)."""
    name = v.gpu_name(*key)
    model, _, micro_batch = v.workload
    r = v.table.throughput_for(name, v.cfg.precision, model, micro_batch)
    ref = (r.value, r.lower, r.upper, f"{r.value:g} img/s ({r.gpu}, {r.precision})", r.source) if r else None
    got = judge_both(ips, ref, peers.get(name, []), v.table.relative, lambda m: f"{name} {m:.1f} img/s",
                     lines.get(name))
    if got is None:
        return ("SKIP", "none", f"no published figure for {name} / {model} at micro batch "
                f"{micro_batch} ({v.cfg.precision}) and no other GPU of this model here: nothing to judge "
                "it against")
    return got if r else (got[0], got[1], f"{got[2]}; no published figure for {name} / {model}")


def _per_round(v: Validation, rounds: list[tuple[dict, dict]]) -> list[tuple[dict, dict, dict]]:
    """--repeats: each round's (figures, peers by model, lines), once per round, not once per GPU and round."""
    out = []
    for r in rounds:
        figs = {q: x["images_per_s"] for q, x in r[0].items()}
        out.append((figs, by_model(v, figs), model_lines(v, figs, {q: x["se"] for q, x in r[0].items()}, {})))
    return out


def _over_repeats(v: Validation, k: tuple[str, int], rounds: list[tuple[dict, dict, dict]], status: str,
                  reason: str) -> tuple[str, str]:
    """--repeats: (status, reason): the verdict of the GPU's median figure against the medians' lines (`status`),
    but WARN where that PASSes and it FAILed in at least half of its rounds (_per_round: each round against its
    own lines; with two, neither round outvotes the other), or FAILs and it FAILed in fewer than half: drained
    only where its median and most rounds on their own say so. A vote of rounds instead (FAIL only when every round
    failed, WARN when any did not pass) FAILs nothing at --repeats 5 and WARNs every GPU one noisy round moved
    (benchmarks/fleet_replay.py: 97 healthy GPUs in 1,000 at --repeats 3 on Longhorn's ResNet)."""
    verdicts = []
    for figs, peers, lines in rounds:
        if k not in figs:
            verdicts.append("FAIL")
            continue
        verdicts.append(judge_gpu(v, k, figs[k], peers, lines)[0])
    judged = [x for x in verdicts if x != "SKIP"]
    failed, fails = sum(x != "PASS" for x in judged), sum(x == "FAIL" for x in judged)
    if judged and (status == "PASS" and 2 * fails >= len(judged) or status == "FAIL" and 2 * fails < len(judged)):
        status = "WARN"
    return status, (f"not PASS in {failed} of {len(judged)} rounds ({', '.join(verdicts)}); the median of "
                    f"{len(judged)} rounds: {reason}")


def _named(v: Validation, kept: dict, by_round: dict) -> tuple[dict, dict, dict[tuple[str, int], tuple[str, str]]]:
    """(figures, lines, {GPU: (status, reason)} of the GPUs not PASS) of one round's figures per GPU (`kept`: each
    GPU's figures as gpu_rounds.measure gives them; by_round: each GPU's figures over the rounds they come from)."""
    ips = {k: s["images_per_s"] for k, s in kept.items()}
    lines = model_lines(v, ips, {k: s["se"] for k, s in kept.items()}, by_round)
    peers = by_model(v, ips)
    named = {}
    for k, x in ips.items():
        status, _, reason = judge_gpu(v, k, x, peers, lines)
        if status != "PASS":
            named[k] = (status, reason)
    return ips, lines, named


def _as_quick(v: Validation, rounds: list[tuple[dict, dict]]) -> dict[tuple[str, int], tuple[str, str]]:
    """{GPU: (status, reason)} of the GPUs that quick's rule names on the first two of three or more rounds: each
    GPU's faster of the two against the lines of the two rounds (what a quick validate that took its second round
    would say). A run's transients only slow a GPU (a first run's warm-up, a neighbour's job, a hot rack), so the
    faster of two is narrow where a median of three is not: Longhorn's ResNet rounds put a healthy node's third
    round 10% down, which makes the median of three wide (12%) and passes the stragglers c007-12 and c008-8 that
    the faster of their first two rounds FAILs (benchmarks/fleet_replay.py)."""
    two = rounds[:2]
    keys = set(two[0][0]) & set(two[1][0])
    best = {k: max((r[0][k] for r in two), key=lambda s: s["images_per_s"]) for k in keys}
    return _named(v, best, {k: [r[0][k]["images_per_s"] for r in two] for k in keys})[2]


def _gpu_row(v: Validation, k: tuple[str, int], rounds: list[tuple[dict, dict]], ips: dict, peers: dict,
             lines: dict, judged: list[tuple[dict, dict, dict]], t0: float, of: int,
             quick: dict[tuple[str, int], tuple[str, str]] | None = None) -> str:
    """One GPU's row; its status."""
    host, slot = k
    if k not in ips:
        why, measured = next((r[1][k] for r in reversed(rounds) if k in r[1]), ("no figure", False))
        # Failed while it trained: the GPU's (FAIL). Never started: nothing is known of the GPU (ERROR).
        status = "FAIL" if measured else "ERROR"
        v.add_gpu("throughput", host, slot, status, reason=f"its run failed: {why}" if measured else
                  f"could not be measured: {why}", t0=t0)
        return status
    status, reference, reason = judge_gpu(v, k, ips[k], peers, lines)
    value = f"{ips[k]:.1f} img/s" + (" (faster of 2 rounds)" if len(rounds) == 2 and of == 1 else "")
    if of > 1:
        status, reason = _over_repeats(v, k, judged, status, reason)
        if status == "PASS" and quick and k in quick:
            # Held, not drained: its median, the better figure where rounds move both ways, is within the noise.
            status = "WARN"
            reason = (f"its first two rounds as quick judges them (the faster of the two) {quick[k][0]}: "
                      f"{quick[k][1]}; {reason}")
        value = f"{ips[k]:.1f} img/s (median of {of})"
    v.add_gpu("throughput", host, slot, status, value, reference, reason, t0=t0, figure=ips[k])
    return status


def _whole_nodes(v: Validation, ips: dict, gpu_lines: dict) -> dict[str, tuple[str, float, Lines]]:
    """The nodes whose every GPU is slow, judged as nodes (peer_lines.whole_nodes), per GPU model."""
    per_model: dict[str, dict[str, list[float]]] = {}
    for (h, s), x in ips.items():
        per_model.setdefault(v.gpu_name(h, s), {}).setdefault(h, []).append(x)
    out = {}
    for name, nodes in per_model.items():
        lines, got = peer_lines.whole_nodes(nodes, STRAGGLER_WARN, gpu_lines.get(name))
        out.update({h: (status, dev, lines) for h, (status, dev) in got.items()})
    return out


def _node_rows(v: Validation, res: dict[str, list[int]], ips: dict, statuses: dict, lines: dict, t0: float) -> None:
    """A node's row sums its GPUs and names the slowest: a summary (its GPUs' rows carry the verdicts), but for a
    node whose every GPU is slow, whose row judges it as one (the node's verdict: FAIL drains it)."""
    whole = _whole_nodes(v, ips, lines)
    for host, slots in res.items():
        mine = {s: ips[(host, s)] for s in slots if (host, s) in ips}
        worst = max((statuses[(host, s)] for s in slots), key=_ORDER.__getitem__)
        v.figures["node_images_per_s"][host] = sum(mine.values()) if mine else None
        if not mine:
            v.add("throughput", host, worst, reason="no GPU of this node measured (its GPUs' rows say why)", t0=t0)
            continue
        slow = min(mine, key=mine.get)
        bad = [f"{host}:{s} {statuses[(host, s)]}" for s in slots if statuses[(host, s)] in ("FAIL", "ERROR", "WARN")]
        value = (f"{len(slots)} GPU(s): {sum(mine.values()):.1f} img/s together, slowest {host}:{slow} "
                 f"{mine[slow]:.1f} img/s")
        summary = "; ".join(bad) if bad else "every GPU of the node as its own row says"
        if host in whole:  # a whole-node straggler: the node's own verdict
            status, dev, node = whole[host]
            v.add_node("throughput", host, max(status, worst, key=_ORDER.__getitem__), value,
                       f"median GPU of {node.n} nodes",
                       f"every GPU slower than the median GPU: the node's median GPU {pct(dev)} from the nodes' (its "
                       "fastest GPU past the WARN line too), "
                       f"{node.describe()}: the node (its cooling, power, host), not one GPU; {summary}", t0=t0,
                       figure=sum(mine.values()))
            continue
        v.add("throughput", host, worst, value, "its GPUs' rows", summary + " (summary row)", t0=t0,
              figure=sum(mine.values()))


def _names(v: Validation, first: dict) -> bool:
    """Whether one round's figures name a GPU (below its lines) or a node (every GPU slow, bench.analysis.peer_lines
    .whole_nodes): where the level then measures its repeats."""
    ips, lines, named = _named(v, first, {})
    return bool(named) or bool(_whole_nodes(v, ips, lines))


def throughput(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("throughput", per_gpu=True)
    res = v.good_resources()
    if not res:
        return
    rounds = take(v, res, lambda first: _names(v, first))
    # Judged as repeats (each GPU's median, lines over the medians) with --repeats or the level's own rounds.
    of = len(rounds) if v.cfg.repeats > 1 or len(rounds) > 2 else 1
    keys = [(h, s) for h, slots in res.items() for s in slots]
    kept = chosen(v, keys, rounds)
    ips = {k: s["images_per_s"] for k, s in kept.items()}
    by_round = {k: [r[0][k]["images_per_s"] for r in rounds if k in r[0]] for k in keys}
    lines = model_lines(v, ips, {k: s["se"] for k, s in kept.items()},
                        {k: xs for k, xs in by_round.items() if len(xs) == len(rounds)}, of=of)
    v.figures["gpu_lines"] = {name: (dataclasses.asdict(x) if x else None) for name, x in lines.items()}
    peers, judged = by_model(v, ips), _per_round(v, rounds) if of > 1 else []
    quick = _as_quick(v, rounds) if of > 2 else None
    statuses = {k: _gpu_row(v, k, rounds, ips, peers, lines, judged, t0, of, quick) for k in keys}
    _node_rows(v, res, ips, statuses, lines, t0)
