"""validate's training check: one short data-parallel run over the GPUs still good, with a sanity gate.

The run is `bench run` over every good slot of every good node (one launch,
DeepSpeed, the level's model). It PASSes when it finished, trained (the
record's sanity: loss finite and falling, world size as planned) and every
rank ended near the others' final loss. Each rank's own work per step (its
step minus its time with a collective in flight) is kept for the straggler
view where that time is measured (gloo on CPU ranks: host clocks see it);
on CUDA, NCCL's kernels run on streams the host clock cannot see, so the
rank view is null with that reason (never a 0 that makes every rank equal).
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
from typing import Any

from bench.analysis import metrics
from bench.validate import runs
from bench.validate.state import CLUSTER, Validation

# Ranks of one data-parallel run see different shards: their final losses differ, but not by this much.
LOSS_AGREEMENT = 0.5


def own_work(rank: dict) -> tuple[float | None, str | None]:
    """(a rank's median step minus its median time with a collective in flight, None) or (None, why not).

    In a synchronous step every rank's wall-clock step equals the slowest's; the difference is spent inside
    the collectives, waiting for it.
    """
    if rank.get("comm_timing"):
        return None, rank["comm_timing"]
    comm = [s.get("seconds") for s in (rank.get("comm_steps") or [])[rank.get("warmup_steps", 0):]]
    if not comm or any(c is None for c in comm):
        return None, "the time with a collective in flight was not measured in every step"
    steps = rank["step_s"]
    return max(metrics.percentile(steps, 50) - metrics.percentile(comm, 50), 1e-9), None


def training(v: Validation) -> None:
    t0 = time.time()
    res = v.good_resources()
    if not res:
        v.add("training", CLUSTER, "SKIP", reason="no good GPU left")
        return
    rec = runs.training(v, res, v.level.dp_steps)
    world = sum(len(s) for s in res.values())
    if rec.get("status") != "ok":
        # No node is named by a run that stopped: nothing it measured says which node failed (the per-GPU and
        # link checks judge each one); the nodes it covered are unknown for this check (ERROR).
        err = rec.get("error") or {}
        v.add("training", CLUSTER, "ERROR", reference=f"world size {world}",
              reason=f"could not be measured: the data-parallel run failed at {err.get('where')}: "
                     f"{err.get('reason')}", t0=t0)
        return
    fig, summary = rec["figures"], _summary(rec)
    ranks = summary.get("ranks") or []
    problems = [f"{k} is false" for k, ok in fig["sanity"].items() if not ok]
    finals = [r["loss"][-1] for r in ranks]
    if finals:
        med = metrics.percentile([x for x in finals if math.isfinite(x)] or [0.0], 50)
        off = [r["rank"] for r in ranks if not math.isfinite(r["loss"][-1]) or
               abs(r["loss"][-1] - med) > LOSS_AGREEMENT * abs(med)]
        if off:
            problems.append(f"rank(s) {off} ended far from the median final loss {med:.3f}")
    v.figures["dp"] = {"world_size": fig["world_size"], "images_per_s": fig["images_per_s"], "hosts": list(res),
                       "resources": res}
    compute: dict[str, float | None] = {}
    why_not = set()
    for r in ranks:
        t, why = own_work(r)
        compute[f"{r['host']}:{r['local_rank']}"] = t
        if why:
            why_not.add(why)
    v.figures["rank_compute_s"] = compute
    v.figures["rank_compute_reason"] = "; ".join(sorted(why_not)) or None
    v.figures.setdefault("params", (summary.get("model") or {}).get("params"))
    v.add("training", CLUSTER, "FAIL" if problems else "PASS",
          f"{fig['images_per_s']:.1f} img/s, world {fig['world_size']}, loss {fig['loss']['first']:.3f} -> "
          f"{fig['loss']['last']:.3f}", f"world size {world}, loss falls, ranks agree",
          "; ".join(problems) or f"{len(ranks)} ranks, {summary.get('total_steps', '?')} steps each", t0=t0)


def _summary(rec: dict) -> dict[str, Any]:
    # Every rank's record: millions of objects at 8,000 ranks, none of them in a cycle, whose making set off the
    # cyclic collector over the whole heap again and again (two thirds of the parse); paused for the parse.
    was = gc.isenabled()
    gc.disable()
    try:
        with open(os.path.join(rec["run_dir"], "summary.json")) as f:
            return json.load(f)
    except (OSError, KeyError, ValueError):
        return {}
    finally:
        if was:
            gc.enable()
