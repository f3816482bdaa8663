"""bench tune's figures from its trials: the ranking, the run-to-run spread, the tie rule, tune.json's schema.

    rows = rank(trials)                  # one row per candidate that ran ok, best first
    v = verdict(rows)                    # winner, or tie when the gap is within the spread
    validate_doc(doc)                    # tune.json against bench/schemas/tune.schema.json

A trial is a dict: candidate (its key, strategy, gpus, micro_batch,
grad_accum), steps, repeat, status and the record's figures (images_per_s,
mfu, peak_memory_bytes, comm_share, ...). A candidate's figure is the mean of
its ok runs at the longest length it reached; its spread is the range (max -
min) of those runs. Candidates that survived a longer rung of successive
halving rank above those eliminated earlier (successive halving's own order).

The tie rule: the winner must beat the runner-up by more than the spread,
the larger of the two finalists' ranges at the final length. With fewer than
two runs of either there is no spread and the verdict is a tie with that
reason: one run of each cannot tell a real difference from noise.
"""

from __future__ import annotations

import json
import os
from typing import Any

SCHEMA_VERSION = 1
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "schemas", "tune.schema.json")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def trial_figures(rec: dict[str, Any]) -> dict[str, Any]:
    """The few figures of a point record that tune ranks and shows."""
    fig = rec.get("figures") or {}
    peaks = fig.get("peak_memory_bytes") or []
    return {"images_per_s": fig.get("images_per_s"), "mfu": fig.get("mfu"), "mfu_reason": fig.get("mfu_reason"),
            "peak_memory_bytes": max(peaks) if peaks else None, "memory_kind": fig.get("memory_kind"),
            "model_states_bytes": fig.get("model_states_bytes"), "comm_share": fig.get("comm_share"),
            "comm_share_reason": fig.get("comm_share_reason"), "global_batch": fig.get("global_batch")}


def _best_length(runs: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    steps = max(r["steps"] for r in runs)
    return steps, [r for r in runs if r["steps"] == steps]


def _one_gpu(trials: list[dict[str, Any]], mb: int, accum: int) -> float | None:
    ones = [t for t in trials if t["status"] == "ok" and t["candidate"]["gpus"] == 1
            and t["candidate"]["micro_batch"] == mb and t["candidate"]["grad_accum"] == accum]
    if not ones:
        return None
    _, runs = _best_length(ones)
    return _mean([r["figures"]["images_per_s"] for r in runs])


def _mean_or_none(runs: list[dict[str, Any]], key: str) -> float | None:
    xs = [r["figures"][key] for r in runs if r["figures"].get(key) is not None]
    return _mean(xs) if xs else None


def rank(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per candidate with an ok run, best first (module docstring)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        if t["status"] == "ok" and (t.get("figures") or {}).get("images_per_s"):
            by_key.setdefault(t["candidate"]["key"], []).append(t)
    rows = []
    for key, runs in by_key.items():
        steps, at = _best_length(runs)
        c = at[0]["candidate"]
        ips = [r["figures"]["images_per_s"] for r in at]
        first = at[0]["figures"]
        row: dict[str, Any] = {**c, "steps": steps, "runs": len(at), "images_per_s": _mean(ips),
                               "images_per_s_runs": ips, "spread": max(ips) - min(ips) if len(ips) > 1 else None,
                               "mfu": _mean_or_none(at, "mfu"), "mfu_reason": first.get("mfu_reason"),
                               "peak_memory_bytes": max((r["figures"]["peak_memory_bytes"] or 0) for r in at) or None,
                               "memory_kind": first.get("memory_kind"),
                               "model_states_bytes": first.get("model_states_bytes"),
                               "comm_share": _mean_or_none(at, "comm_share"),
                               "comm_share_reason": first.get("comm_share_reason"),
                               "global_batch": first.get("global_batch"), "run_dirs": [r["run_dir"] for r in at]}
        if c["gpus"] == 1:
            row["efficiency"], row["efficiency_reason"] = 1.0, None
        else:
            x1 = _one_gpu(trials, c["micro_batch"], c["grad_accum"])
            row["efficiency"] = row["images_per_s"] / (c["gpus"] * x1) if x1 else None
            row["efficiency_reason"] = None if x1 else (
                f"no 1-GPU trial at micro batch {c['micro_batch']} and accumulation {c['grad_accum']} ran ok")
        rows.append(row)
    rows.sort(key=lambda r: (-r["steps"], -r["images_per_s"], r["key"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """winner / tie / none, with the gap, the spread and why (module docstring)."""
    if not rows:
        return {"verdict": "none", "winner": None, "runner_up": None, "gap": None, "spread": None,
                "reason": "no candidate ran ok"}
    a = rows[0]
    if len(rows) == 1:
        return {"verdict": "winner", "winner": a["key"], "runner_up": None, "gap": None, "spread": a["spread"],
                "reason": "the only candidate that ran ok"}
    b = rows[1]
    gap = a["images_per_s"] - b["images_per_s"]
    out = {"winner": a["key"], "runner_up": b["key"], "gap": gap}
    if a["steps"] != b["steps"]:
        return {**out, "verdict": "winner", "spread": a["spread"],
                "reason": f"the runner-up was eliminated at a shorter length ({b['steps']} steps vs {a['steps']})"}
    if a["spread"] is None or b["spread"] is None:
        return {**out, "verdict": "tie", "spread": None,
                "reason": "no repeats of both finalists fit in the budget, so there is no spread to beat"}
    spread = max(a["spread"], b["spread"])
    if gap > spread:
        return {**out, "verdict": "winner", "spread": spread,
                "reason": f"beats the runner-up by {gap:.1f} img/s, more than the spread ({spread:.1f} img/s)"}
    return {**out, "verdict": "tie", "spread": spread,
            "reason": f"the gap ({gap:.1f} img/s) is within the run-to-run spread ({spread:.1f} img/s)"}


def validate_doc(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when tune.json does not match its schema."""
    import jsonschema

    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    error = jsonschema.exceptions.best_match(cls(schema).iter_errors(doc))
    if error is not None:
        raise error
