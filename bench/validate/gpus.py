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
from bench.validate import runs
from bench.validate.state import RANK, Validation

# The share of the cluster's throughput one GPU may cost before it is named a straggler (metrics.straggler_cost).
STRAGGLER_WARN = 0.10
_ORDER = RANK


def pct(x: float) -> str:
    return f"{x:+.0%}"


def straggler_line(ses: list[float]) -> tuple[float, float]:
    """(the cost at which a GPU is called a straggler, the noise part of it): the larger of STRAGGLER_WARN and 3
    standard errors of the median GPU's mean step (the median GPU's, not the straggler's own, which a throttled
    GPU's uneven steps make large): a cost within what a typical GPU's mean moves run to run is noise."""
    ses = sorted(ses)
    noise = 3 * ses[len(ses) // 2] if ses else 0.0
    return max(STRAGGLER_WARN, noise), noise


def relative_se(steps: list[float]) -> float:
    """The standard error of a GPU's mean step, relative to it: how far its mean may move run to run."""
    if len(steps) < 2:
        return 0.0
    mean = sum(steps) / len(steps)
    var = sum((x - mean) ** 2 for x in steps) / (len(steps) - 1)
    return (var ** 0.5) / len(steps) ** 0.5 / mean


def _round(v: Validation, res: dict[str, list[int]], tag: str, with_numerics: bool = False,
           extras: bool = False) -> tuple[dict, dict]:
    """One launch: ({(host, slot): figures}, {(host, slot): (why it has none, whether it was measured)}); with
    numerics, every rank runs the numerics job first and its entries wait in v.numerics_ahead for that check;
    with extras, its copies and burn where asked (v.phases_ahead, for their checks)."""
    rec = runs.alone(v, res, tag, with_numerics=with_numerics, extras=extras)
    if extras:
        runs.keep_phases(v, res, rec)
    if with_numerics:
        v.numerics_ahead = {"resources": res, "ranks": rec.get("numerics") or [], "run_dir": rec.get("run_dir"),
                            "error": rec.get("error")}
    ok, failed = {}, {}
    for r in rec.get("alone") or []:
        key = (r["host"], r["slot"])
        if r["status"] == "ok" and r.get("step_s"):
            steps = r["step_s"]
            ok[key] = {"images_per_s": metrics.images_per_s(v.workload[2], metrics.percentile(steps, 50)),
                       "samples": steps, "se": relative_se(steps), "params": r.get("params")}
        else:
            failed[key] = (r.get("reason") or r["status"], bool(r.get("measured")))
    if not rec.get("alone"):
        err = rec.get("error") or {}
        why = f"the per-GPU run failed at {err.get('where')}: {err.get('reason')}"
        failed = {(h, s): (why, False) for h, slots in res.items() for s in slots}
    return ok, failed


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


def _rounds(v: Validation, res: dict[str, list[int]]) -> list[tuple[dict, dict]]:
    """The per-GPU launches: --repeats rounds, or one and, where its costliest GPU would be named a straggler,
    one more. The first round's ranks run the numerics job first: one launch (one start-up) for the per-GPU
    checks."""
    rounds = [_round(v, res, "throughput" if r == 0 else f"throughput-r{r + 1}",
                     with_numerics=r == 0 and v.cfg.wanted("numerics"), extras=r == 0) for r in range(v.cfg.repeats)]
    first = rounds[0][0]
    if v.cfg.repeats == 1 and v.confirm_stragglers and len(first) >= 2 and \
            metrics.straggler_cost({k: 1 / s["images_per_s"] for k, s in first.items()}) >= \
            straggler_line([s["se"] for s in first.values()])[0]:
        # One slow GPU in one measurement is not yet a straggler: GPUs that share cores, power or cooling can
        # be unlucky once. Measure every GPU again and keep each one's faster round: slow in both is slow. (A
        # cost under the line the stragglers check draws would not name one: no second launch for it.) Only the
        # GPUs the first round measured: one that failed stays failed (a second chance would hide a crash), and
        # one that never started would only be waited for again.
        again = {h: kept for h, slots in res.items() if (kept := [s for s in slots if (h, s) in first])}
        rounds.append(_round(v, again, "throughput-repeat"))
    return rounds


def _chosen(v: Validation, keys: list[tuple[str, int]], rounds: list[tuple[dict, dict]]) -> dict:
    """Each GPU's figures: its median round (with 2, the faster: one bad round does not make a GPU slow); the
    figures every later check reads (images/s, step samples and their standard error, the model's size)."""
    per_key = {k: sorted((r[0][k] for r in rounds if k in r[0]), key=lambda s: s["images_per_s"]) for k in keys}
    chosen = {k: xs[len(xs) // 2] for k, xs in per_key.items() if xs}
    for k, s in chosen.items():
        name = f"{k[0]}:{k[1]}"
        v.figures["gpu_images_per_s"][name] = s["images_per_s"]
        v.figures.setdefault("gpu_step_samples", {})[name] = s["samples"]
        v.figures.setdefault("gpu_step_se", {})[name] = s["se"]
        if s["params"]:
            v.figures.setdefault("params", s["params"])
    v.figures["gpu_rounds"] = len(rounds)
    v.derived.clear()
    if len(rounds) > 1:
        v.figures["gpu_images_per_s_rounds"] = {f"{h}:{s}": [r[0][(h, s)]["images_per_s"] if (h, s) in r[0] else None
                                                            for r in rounds] for h, s in keys}
    return chosen


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


def _gpu_row(v: Validation, k: tuple[str, int], rounds: list[tuple[dict, dict]], ips: dict, peers: dict,
             lines: dict, judged: list[tuple[dict, dict, dict]], t0: float) -> str:
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
    value = f"{ips[k]:.1f} img/s" + (" (faster of 2 rounds)" if len(rounds) == 2 and v.cfg.repeats == 1 else "")
    if v.cfg.repeats > 1:
        status, reason = _over_repeats(v, k, judged, status, reason)
        value = f"{ips[k]:.1f} img/s (median of {v.cfg.repeats})"
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
            v.add_node("throughput", host, max(status, worst, key=_ORDER.__getitem__), value, f"median GPU of {node.n} nodes",
                       f"every GPU slower than the median GPU: the node's median GPU {pct(dev)} from the nodes', "
                       f"{node.describe()}: the node (its cooling, power, host), not one GPU; {summary}", t0=t0,
                       figure=sum(mine.values()))
            continue
        v.add("throughput", host, worst, value, "its GPUs' rows", summary + " (summary row)", t0=t0,
              figure=sum(mine.values()))


def throughput(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("throughput", per_gpu=True)
    res = v.good_resources()
    if not res:
        return
    rounds = _rounds(v, res)
    keys = [(h, s) for h, slots in res.items() for s in slots]
    chosen = _chosen(v, keys, rounds)
    ips = {k: s["images_per_s"] for k, s in chosen.items()}
    by_round = {k: [r[0][k]["images_per_s"] for r in rounds if k in r[0]] for k in keys}
    lines = model_lines(v, ips, {k: s["se"] for k, s in chosen.items()},
                        {k: xs for k, xs in by_round.items() if len(xs) == len(rounds)}, of=v.cfg.repeats)
    v.figures["gpu_lines"] = {name: (dataclasses.asdict(x) if x else None) for name, x in lines.items()}
    peers, judged = by_model(v, ips), _per_round(v, rounds) if v.cfg.repeats > 1 else []
    statuses = {k: _gpu_row(v, k, rounds, ips, peers, lines, judged, t0) for k in keys}
    _node_rows(v, res, ips, statuses, lines, t0)
