"""The start barriers of one launch, from bench's plan (plan.json), never from what a rank says.

    planned(plan)      # {"gpus-3": True, "gpus-3-copies-3-alone": True, ...}: each barrier's name -> per_rank

A launch declares its barriers in its plan (bench.jobs.train, bench.jobs.numerics, bench.validate.runs):
"start_barrier" (entered by bench.worker.main: per rank where the launch is
independent, else rank 0 for its run; bench.worker.numerics: per rank),
"numerics"'s "barrier", "burn"'s "barrier", and "copies"'s "barrier", whose
name is the stem of the copies phase's own (bench.worker.copies: a turn
alone, then every rank at once; COPY_TURNS and COPY_KINDS are that module's,
tests/unit/test_hub_barriers.py holds them equal). The hub holds these and
no other: a rank that enters another is refused for itself alone.
"""

from __future__ import annotations

from typing import Any

COPY_TURNS = 2                             # bench.worker.copies.CPU_TURNS
COPY_KINDS = ("h2d", "d2h", "both", "d2d")  # bench.worker.gpu_copies.KINDS


def copies_names(stem: str) -> list[str]:
    """Every barrier the copies phase enters under its plan's name (CPU and GPU ranks alike)."""
    return [f"{stem}-alone", *(f"{stem}-alone{k + 1}" for k in range(1, COPY_TURNS)), f"{stem}-together",
            *(f"{stem}-together-{kind}" for kind in COPY_KINDS)]


def _name(spec: Any) -> str | None:
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None


def planned(plan: dict[str, Any]) -> dict[str, bool]:
    """Each barrier of the launch: its name -> whether every rank counts in it (else rank 0 for its run)."""
    out: dict[str, bool] = {}
    if (name := _name(plan.get("start_barrier"))) is not None:
        out[name] = bool(plan.get("independent"))
    for part in ("numerics", "burn"):
        if (name := _name((plan.get(part) or {}).get("barrier") if isinstance(plan.get(part), dict) else None)):
            out[name] = True
    copies = plan.get("copies")
    if isinstance(copies, dict) and (stem := _name(copies.get("barrier"))) is not None:
        out.update(dict.fromkeys(copies_names(stem), True))
    return out
