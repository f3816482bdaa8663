"""The per-GPU launches of validate's throughput check: one round of every GPU alone, all at once, and the rounds
after it (--repeats, or the level's own where its first round names a GPU or a node); each GPU's figures kept."""

from __future__ import annotations

from typing import Callable

from bench.analysis import metrics
from bench.validate import runs
from bench.validate.state import Validation

# The share of the cluster's throughput one GPU may cost before it is named a straggler (metrics.straggler_cost).
STRAGGLER_WARN = 0.10


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


def measure(v: Validation, res: dict[str, list[int]], tag: str, with_numerics: bool = False,
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


def take(v: Validation, res: dict[str, list[int]], names: Callable[[dict], bool]) -> list[tuple[dict, dict]]:
    """The per-GPU launches: --repeats rounds; without it one, and where that one names a GPU or a node (`names`:
    bench.validate.gpus judges the round) the level's repeats in all (Level.repeats, full's 3), else where its
    costliest GPU would be named a straggler one more. The first round's ranks run the numerics job first: one
    launch (one start-up) for the per-GPU checks."""
    rounds = [measure(v, res, "throughput" if r == 0 else f"throughput-r{r + 1}",
                      with_numerics=r == 0 and v.cfg.wanted("numerics"), extras=r == 0) for r in range(v.cfg.repeats)]
    first = rounds[0][0]
    if v.cfg.repeats > 1 or not v.confirm_stragglers or len(first) < 2:
        return rounds
    # Only the GPUs the first round measured: one that failed stays failed (a second chance would hide a crash),
    # and one that never started would only be waited for again.
    again = {h: kept for h, slots in res.items() if (kept := [s for s in slots if (h, s) in first])}
    if v.level.repeats > 1 and names(first):
        # One round cannot tell a node a few percent slow from a GPU's run-to-run noise (a first run's transient):
        # the median of the level's rounds can (levels.py says why that many).
        more = [measure(v, again, f"throughput-r{r + 1}") for r in range(1, v.level.repeats)]
        # A second look whose launch measured nothing says nothing of the GPUs (its failure is in its record): left
        # out, not counted as a round every GPU failed.
        return rounds + [r for r in more if r[0]]
    if metrics.straggler_cost({k: 1 / s["images_per_s"] for k, s in first.items()}) >= \
            straggler_line([s["se"] for s in first.values()])[0]:
        # One slow GPU in one measurement is not yet a straggler: GPUs that share cores, power or cooling can
        # be unlucky once. Measure every GPU again and keep each one's faster round: slow in both is slow. (A
        # cost under the line the stragglers check draws would not name one: no second launch for it.)
        rounds.append(measure(v, again, "throughput-repeat"))
    return rounds


def chosen(v: Validation, keys: list[tuple[str, int]], rounds: list[tuple[dict, dict]]) -> dict:
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


