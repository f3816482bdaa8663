"""The record of an independent run: every rank trained alone (a world of one), and each has figures of its own.

    rec = train.run(cfg, hosts, train.Mode(independent=True, inspected=...))
    for r in rec["alone"]:
        r["host"], r["slot"], r["status"], r["figures"]["images_per_s"]

bench validate's per-GPU check launches one such run over every selected
slot of every node: all GPUs busy at once, as in training, and none waits
for another. A rank's result is its own alone/rank<R>.json (the summary a
one-rank run writes), read by name (bench.launch.records: a rank that said
it wrote one and whose file is missing is an error naming it); a rank without one failed, and gets the launch's
diagnosis when it is the rank named there, else its own report or "no
report". Rank R is slot k of host h in plan order: DeepSpeed's launchers
number ranks host by host, slot by slot, in the order of the resources.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from bench.core import provenance, results
from bench.core.placement import rank_slots
from bench.core.config import RunConfig
from bench.launch import exits
from bench.launch.execute import Outcome
from bench.launch.records import read_rank


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def measured(report: dict[str, Any]) -> bool:
    """Whether a failed rank was measured before it failed (its GPU's fault, a FAIL) or not (nothing is known of
    its GPU: validate's ERROR): it trained a step, or ran out of memory (the GPU had less than the model needs);
    not where its own report could not be written (bench's storage, not the GPU)."""
    if str(report.get("error") or "").startswith("StorageFailed") or report.get("garbled"):
        return False  # a garbled report is its rank's word that it sent one, not a measure of its GPU
    return report.get("status") == "oom" or bool(((report.get("at") or {}).get("step") or 0) > 0)


def silent_rank(run_dir: str, outcome: Outcome, rank: int) -> str:
    """Why a rank left no report: it never started (bench's hub never heard from it: its process exited before
    bench's rank code ran, e.g. at an import, or never ran), a signal ended it (its launcher's words: an
    independent launch through mpirun exits 0 whatever its ranks did, so this is where a SIGKILL shows), or it was
    stopped when its run ended. Who started is the hub's word, not a file a shared disk may not show yet."""
    said = outcome.ranks.get(rank)
    if said is None:
        return ("never started: its process exited before bench's rank code ran (an import on its node? the "
                "launcher's log in the run folder says how it ended)")
    if (sig := exits.signals(run_dir, [(rank, said.host, said.pid)]).get(rank)) is not None:
        return f"no report: killed by {sig}" + (" (kill -9, or the kernel's OOM killer)" if sig == "SIGKILL" else "")
    return ("no report: stopped when its run ended (the run was stopped, or its launcher ended it)"
            if outcome.status != "ok" else "no report")


def record(cfg: RunConfig, plan: dict, run_id: str, run_dir: str, outcome: Outcome, extra: dict[str, Any],
           ds_config: dict[str, Any], figures_of: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """An "alone" record whose "alone" lists every rank's result; ok only when every rank's is."""
    per_rank, seen = [], []
    reports = {r.get("rank"): r for r in outcome.rank_files}
    named = (outcome.error or {}).get("rank")
    for rank, (host, slot) in enumerate(rank_slots(plan["resources"])):
        entry: dict[str, Any] = {"rank": rank, "host": host, "slot": slot}
        summary, missing = read_rank(run_dir, os.path.join("alone", f"rank{rank}.json"), rank, outcome.ranks)
        if missing:
            reports.setdefault(rank, {"rank": rank, "host": host, "status": "failed", "error": missing})
        if summary is not None and (summary.get("ranks") or [{}])[0].get("status") == "ok":
            seen.append(summary)
            entry.update(status="ok", figures=figures_of(cfg, summary, 1, ds_config),
                         hostname=summary["ranks"][0].get("host"), device=summary["ranks"][0].get("device"),
                         step_s=summary["ranks"][0].get("step_s"), params=(summary.get("model") or {}).get("params"))
        else:
            own = reports.get(rank) or {}
            if rank == named:
                reason = (outcome.error or {}).get("reason") or "failed"
            elif own.get("status") in ("failed", "oom"):
                reason = own.get("error") or own["status"]
            elif outcome.status == "oom" and rank in outcome.ranks:
                # The kernel killed processes, the launch named one: a silent rank that had started is likely
                # another (61 namespace hosts on 24 GiB: 10 kills, one named, ten "stopped when its run ended").
                reason = ("no report: the kernel's OOM killer killed processes during this run, and this rank was "
                          f"likely one ({(outcome.error or {}).get('reason') or 'oom'})")
            else:
                reason = silent_rank(run_dir, outcome, rank)
            # Whether it was measured before it failed: it trained a step (or ran out of memory: the GPU had
            # less than its model needs). Else nothing is known of its GPU: it never started (validate: ERROR).
            entry.update(status="oom" if own.get("status") == "oom" else "failed", reason=reason,
                         measured=measured(own))
        per_rank.append(entry)
    bad = [r for r in per_rank if r["status"] != "ok"]
    body: dict[str, Any] = {"run_id": run_id, "run_dir": run_dir, "config": cfg.to_dict(), "plan": plan,
                            "duration_s": outcome.duration_s, "alone": per_rank, **extra,
                            "provenance": provenance.collect(plan, {"ranks": [s["ranks"][0] for s in seen],
                                                                    "versions": (seen[0] if seen else {}).get("versions")})}
    if bad:
        body["error"] = outcome.error or {"where": f"{bad[0]['host']}:{bad[0]['slot']}", "reason": bad[0]["reason"]}
        body["error"]["failed_slots"] = [f"{r['host']}:{r['slot']}" for r in bad]
    status = "ok" if not bad else ("interrupted" if outcome.status == "interrupted" else "failed")
    return results.make_record("alone", status, **body)
