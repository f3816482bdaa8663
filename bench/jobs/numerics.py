"""One numerics job: the deterministic training job and the exact matmul on every selected GPU at once.

    from bench.jobs.numerics import NumericsSpec, run
    rec = run({"n1": [0, 1], "n2": [0, 1]}, "pdsh", "cuda", NumericsSpec(), out_root="results/v/runs")
    for r in rec["ranks"]:
        r["host"], r["slot"], r["status"], r.get("losses"), r.get("matmul_exact")

The ranks (bench.worker.numerics) are alone: no process group, so a GPU
that hangs or dies costs only its own result. Judging the curves is
bench.analysis.numerics; this module launches and collects.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from bench.core import provenance, results, storage
from bench.core.placement import rank_slots
from bench.jobs.alone import measured, silent_rank
from bench.launch.execute import Outcome, execute
from bench.launch.records import read_rank
from bench.launch.plan import build, plan_json, write_files


@dataclass(frozen=True, slots=True)
class NumericsSpec:
    """The job every GPU runs; the same spec (and stack) must give the same bits."""

    model: str = "vit-micro-p4-32"
    batch: int = 32
    steps: int = 8
    seed: int = 0
    lr: float = 1e-3
    matmul_check_n: int = 512      # the exact product (fp32, integer entries)
    matmul_n: int = 512            # the timed product
    matmul_dtype: str = "fp32"
    matmul_iters: int = 20

    def key(self) -> dict[str, Any]:
        """What a reference curve must have been made with to be compared (the matmul sizes are not in it)."""
        return {k: v for k, v in asdict(self).items() if not k.startswith("matmul")}


def first(spec: NumericsSpec, barrier: str, ranks: int, timeout: float) -> dict[str, Any]:
    """plan.json's "numerics" for ranks that run the job first and then train or measure links (one launch for
    bench validate's per-GPU checks): the spec, and the barrier their timed matmuls start behind (its name)."""
    return {"spec": asdict(spec), "barrier": {"name": barrier, "count": ranks, "timeout_s": timeout / 2}}


def collect(run_dir: str, resources: dict[str, list[int]], outcome: Outcome, folder: str = "ranks") -> list[dict]:
    """One entry per rank: ok with its curve, matmuls and stack (folder/rank<R>.json: "ranks" for the job's own
    launch, "numerics" where ranks ran it first), or failed with why (its own report, the launch's diagnosis)."""
    named = (outcome.error or {}).get("rank")
    out = []
    for rank, (host, slot) in enumerate(rank_slots(resources)):
        got, missing = read_rank(run_dir, os.path.join(folder, f"rank{rank}.json"), rank, outcome.ranks)
        got = got if isinstance(got, dict) else {}
        entry: dict[str, Any] = {"rank": rank, "host": host, "slot": slot}
        if got.get("status") == "ok":
            entry.update({k: got.get(k) for k in ("hostname", "stack", "losses", "params_sha256", "matmul_exact",
                                                  "matmul", "device_index")}, status="ok", hostname=got.get("host"))
        else:
            own = next((r for r in outcome.rank_files if r.get("rank") == rank), None) or {}
            reason = missing or ((outcome.error or {}).get("reason") if rank == named else None) or own.get("error") or \
                silent_rank(run_dir, outcome, rank)
            entry.update(status="failed", reason=reason, measured=measured(own))
        out.append(entry)
    return out


def run(resources: dict[str, list[int]], launcher: str, device: str, spec: NumericsSpec, *, out_root: str,
        timeout: float = 300.0, slots_of: dict[str, int] | None = None, environ: dict[str, str] | None = None,
        container_exec: str | None = None, master_addr: str | None = None,
        accel: str | None = None) -> dict[str, Any]:
    """Launch, wait, and return a "numerics" record: one entry per rank, ok with its curve or failed with why.
    accel: the nodes' accelerator backend (bench.jobs.gate.accel_of), whose visible-devices variable the ranks get."""
    storage.check_room(out_root, sum(len(s) for s in resources.values()))
    run_id = results.new_run_id(out_root, prefix="numerics-")
    run_dir = os.path.abspath(os.path.join(out_root, run_id))
    lp = build(resources, launcher, run_dir, device, master_addr, environ=environ, module="bench.worker.numerics",
               container_exec=container_exec, independent=True, accel=accel)
    # The timed matmuls start together (a barrier, bench.worker.barrier): each GPU is timed under the same load,
    # not while its neighbours still import or train.
    world = sum(len(s) for s in resources.values())
    plan = {**plan_json(lp, resources, device, timeout), "independent": True,
            "start_barrier": {"name": "matmul", "count": world, "timeout_s": timeout / 2}}
    results.write_json_atomic(os.path.join(run_dir, "numerics.json"), asdict(spec))
    results.write_json_atomic(os.path.join(run_dir, "plan.json"), plan)
    write_files(lp, resources, slots_of)
    outcome = execute(lp, run_dir, timeout=timeout, expect_summary=False)
    ranks = collect(run_dir, resources, outcome)
    status = "ok" if all(r["status"] == "ok" for r in ranks) else \
        "interrupted" if outcome.status == "interrupted" else "failed"
    body: dict[str, Any] = {"run_id": run_id, "run_dir": run_dir, "duration_s": outcome.duration_s,
                            "numerics": asdict(spec), "plan": plan, "ranks": ranks,
                            "provenance": provenance.collect(plan, None)}
    if status != "ok":
        body["error"] = outcome.error or {"where": "numerics", "reason": "a rank failed"}
    rec = results.make_record("numerics", status, **body)
    results.append(os.path.join(run_dir, "results.jsonl"), rec)
    return rec
