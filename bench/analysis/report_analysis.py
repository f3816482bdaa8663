"""Records -> the report's groups, rows and scaling series. Pure: no rendering.

Every figure comes from a record's own fields or from bench/metrics.py; the
run directories are never read, so a report works on results.jsonl files
copied from another machine.

Time T of a point is its seconds per epoch (`figures.epoch_s`: the
measured wall clock of whole epochs where the run ran them, else the mean
steady step x steps per epoch, an estimate). A series compares like with
like: measured epochs where every point has them, else every point's
estimate, and it says which (`epoch`). Across GPU counts that is "the same
work" in every suite that compares counts: the whole data set (strong,
batch, paper), or a share that grows with N so steps per epoch stay fixed
(weak).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.analysis import metrics, paper
from bench.core import results


@dataclass
class Loaded:
    records: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def load(paths: list[str]) -> Loaded:
    out = Loaded()
    for path in results.iter_result_files(paths):
        rr = results.read(path)
        out.files.append(path)
        out.skipped.extend(rr.skipped)
        out.records.extend(r for r in rr.records if r.get("kind") in ("run", "point"))
    return out


def dedupe(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest record of each sweep point; a run already shown as a point is dropped."""
    latest = results.latest_by_point(records)
    point_runs = {r.get("run_id") for r in latest.values()}
    # A sweep's runs/ folder also holds runs that never became points (interrupted,
    # or killed with bench): they are not results of the sweep.
    sweep_runs = {os.path.dirname(str(r.get("run_dir"))) for r in latest.values() if r.get("run_dir")}
    runs = [r for r in records if r.get("kind") == "run" and r.get("run_id") not in point_runs
            and os.path.dirname(str(r.get("run_dir"))) not in sweep_runs]
    seen: set[str] = set()
    unique_runs = []
    for r in runs:
        if r.get("run_id") in seen:
            continue
        seen.add(r.get("run_id"))
        unique_runs.append(r)
    return list(latest.values()) + unique_runs


def row(rec: dict[str, Any]) -> dict[str, Any]:
    """One point or run as the flat figures the tables, plots and JSON show."""
    cfg = rec.get("config") or {}
    fig = rec.get("figures") or {}
    labels = rec.get("labels") or {}
    gpus = fig.get("world_size") or (rec.get("plan") or {}).get("world_size") or labels.get("gpus")
    mem = fig.get("peak_memory_bytes") or []
    engine = cfg.get("engine", "deepspeed")
    return {
        "id": rec.get("point_id") or rec.get("run_id"), "status": rec.get("status"), "gpus": gpus,
        "labels": labels, "micro_batch": cfg.get("micro_batch"), "grad_accum": cfg.get("grad_accum"),
        "global_batch": fig.get("global_batch"), "zero_stage": cfg.get("zero_stage"), "offload": cfg.get("offload"),
        "precision": cfg.get("precision"), "engine": engine, "model": cfg.get("model"),
        "dataset_fraction": cfg.get("dataset_fraction"), "split": split_of(cfg, gpus),
        "images_per_s": fig.get("images_per_s"), "step_s": (fig.get("step_s") or {}).get("median"),
        "epoch_s": fig.get("epoch_s"), "parts_s": fig.get("parts_s"),
        # Records before epochs were measured always held the estimate, without epoch_s_how.
        "epoch_measured": fig.get("epoch_s_estimated") is False and "epoch_s_how" in fig,
        "epoch_s_estimate": fig.get("epoch_s_estimate", fig.get("epoch_s")),
        "comm_share": fig.get("comm_share"), "comm_share_reason": fig.get("comm_share_reason"),
        **comm_and_memory(fig),
        "peak_memory_bytes": max(mem) if mem else None, "memory_kind": fig.get("memory_kind"),
        "train_acc": fig.get("train_acc"), "test_acc": fig.get("test_acc"),
        "reason": (rec.get("error") or {}).get("reason"),
    }


def split_of(cfg: dict[str, Any], ranks: int | None) -> str | None:
    """T x P x D of a point: tensor-parallel degree, pipeline stages, data-parallel replicas (bench.core.parallel)."""
    t, p = cfg.get("tensor_parallel") or 1, cfg.get("pipeline_stages") or 1
    return f"{t}x{p}x{ranks // (t * p)}" if ranks and ranks % (t * p) == 0 else None


def comm_and_memory(fig: dict[str, Any]) -> dict[str, Any]:
    """The communication and model-state figures of one point, flat (bench.analysis.figures made them)."""
    comm = fig.get("comm") or {}
    states = fig.get("model_states") or {}
    measured, formula = states.get("measured") or {}, states.get("formula") or {}
    return {
        "comm_bytes": comm.get("bytes_per_step"), "comm_bytes_analytic": (comm.get("analytic") or {}).get("bytes_per_step"),
        "comm_formula": (comm.get("analytic") or {}).get("formula"), "comm_over_analytic": comm.get("measured_over_analytic"),
        "comm_s": comm.get("seconds_per_step"), "comm_wire": (comm.get("wire") or {}).get("bytes_per_step"),
        "comm_tp": (comm.get("tensor_parallel") or {}).get("bytes_per_step"),
        "comm_ops": {op: v.get("sent_bytes") for op, v in (comm.get("ops_rank0") or {}).items()},
        "states": {k: measured.get(k) for k in ("params", "grads", "master_params", "optimizer_states", "buffers",
                                                 "total")} if measured else None,
        "states_formula": {k: formula.get(k) for k in ("params", "grads", "master_params", "optimizer_states",
                                                        "total")} if formula else None,
        "states_deepspeed": (states.get("deepspeed_estimate") or {}).get("bytes_per_rank"),
        "states_nvme": (measured.get("by_device") or {}).get("nvme"),
    }


@dataclass
class Group:
    sweep: str
    suite: str
    rows: list[dict[str, Any]]
    scaling: list[dict[str, Any]] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)


def group(records: list[dict[str, Any]]) -> list[Group]:
    groups: dict[str, Group] = {}
    for r in dedupe(records):
        if r.get("kind") == "point":
            key, suite = r.get("sweep") or r.get("suite", "?"), r.get("suite", "?")
        else:
            key, suite = "runs", "runs"
        g = groups.setdefault(key, Group(sweep=key, suite=suite, rows=[]))
        g.rows.append(row(r))
    for g in groups.values():
        # Stable: within a GPU count, records keep the sweep's planned order.
        g.rows.sort(key=lambda x: x["gpus"] or 0)
        analyse(g)
    return list(groups.values())


def _ok(r: dict[str, Any]) -> bool:
    return r["status"] == "ok" and isinstance(r["epoch_s"], (int, float)) and r["epoch_s"] > 0


def _epoch_key(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """Which T a set of points compares: measured epochs where all have them, else all the estimates."""
    if rows and all(r.get("epoch_measured") for r in rows):
        return "epoch_s", "measured"
    return "epoch_s_estimate", "estimated"


def strong_series(name: str, rows: list[dict[str, Any]], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """S(N) = T1/TN, E(N) = S/N, Karp-Flatt, and the Amdahl fit of one series.

    `base` is the 1-GPU point when the series has none of its own (a spread
    series starts at 2 nodes; its 1-GPU point is the packed one)."""
    ok = sorted((r for r in rows if _ok(r)), key=lambda r: r["gpus"])
    one = next((r for r in ok if r["gpus"] == 1), None) or (base if base and _ok(base) else None)
    t, kind = _epoch_key(ok + ([one] if one is not None and one not in ok else []))
    pts = []
    for r in ok:
        p = {"gpus": r["gpus"], "seconds": r[t], "images_per_s": r["images_per_s"], "id": r["id"],
             "speedup": None, "efficiency": None, "karp_flatt": None}
        if one is not None:
            t1 = one[t]
            p["speedup"] = metrics.speedup(t1, r[t])
            p["efficiency"] = metrics.efficiency(t1, r[t], r["gpus"])
            if r["gpus"] > 1:
                p["karp_flatt"] = metrics.karp_flatt(p["speedup"], r["gpus"])
        pts.append(p)
    if one is not None and one not in ok:
        pts.insert(0, {"gpus": 1, "seconds": one[t], "images_per_s": one["images_per_s"], "id": one["id"],
                       "speedup": 1.0, "efficiency": 1.0, "karp_flatt": None})
    scored = [p for p in pts if p["speedup"] is not None]
    f = None
    if any(p["gpus"] > 1 for p in scored):
        f = metrics.amdahl_fit([p["gpus"] for p in scored], [p["speedup"] for p in scored])
    return {"series": name, "kind": "strong", "epoch": kind, "points": pts, "amdahl_serial_fraction": f,
            "note": None if one is not None else "no 1-GPU point: speedup needs T1"}


def weak_series(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """E_w(N) = T1/TN with the work per GPU held fixed."""
    ok = sorted((r for r in rows if _ok(r)), key=lambda r: r["gpus"])
    one = next((r for r in ok if r["gpus"] == 1), None)
    t, kind = _epoch_key(ok)
    pts = [{"gpus": r["gpus"], "seconds": r[t], "images_per_s": r["images_per_s"], "id": r["id"],
            "weak_efficiency": metrics.weak_efficiency(one[t], r[t]) if one else None}
           for r in ok]
    return {"series": name, "kind": "weak", "epoch": kind, "points": pts,
            "note": None if one is not None else "no 1-GPU point: weak efficiency needs T1"}


def _by(rows: list[dict[str, Any]], label: str) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["labels"].get(label, r.get(label)), []).append(r)
    return out


def _ratio(name: str, rows: list[dict[str, Any]], label: str, fast: str, slow: str) -> list[dict[str, Any]]:
    """Speedup of `fast` over `slow` at each GPU count: S = T_slow / T_fast (metrics.speedup)."""
    out = []
    for n, rs in sorted(_by(rows, "gpus").items(), key=lambda kv: kv[0] or 0):
        a = next((r for r in rs if r["labels"].get(label) == fast and _ok(r)), None)
        b = next((r for r in rs if r["labels"].get(label) == slow and _ok(r)), None)
        if a and b:
            t, kind = _epoch_key([a, b])
            out.append({"comparison": name, "gpus": n, fast + "_s": a[t], slow + "_s": b[t], "epoch": kind,
                        "speedup": metrics.speedup(b[t], a[t])})
    return out


def _key(kv: tuple[Any, Any]) -> tuple[int, Any]:
    k = kv[0]
    return (0, k) if isinstance(k, (int, float)) else (1, str(k))


def analyse(g: Group) -> None:
    rows = g.rows
    if g.suite == "strong":
        g.scaling = [strong_series(f"strong {s}", rs) for s, rs in sorted(_by(rows, "sense").items(), key=_key)]
    elif g.suite == "batch":
        g.scaling = [{**strong_series(f"batch mb={mb}", rs), "micro_batch": mb}
                     for mb, rs in sorted(_by(rows, "micro_batch").items(), key=_key)]
    elif g.suite == "weak":
        g.scaling = [weak_series("weak", rows)]
    elif g.suite == "paper":
        for (mb, place), rs in sorted(_paper_series(rows).items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
            base = next((r for r in rows if r["gpus"] == 1 and r["micro_batch"] == mb and _ok(r)), None)
            g.scaling.append(strong_series(f"paper mb={mb} {place}", rs, base))
    elif g.suite == "placement":
        g.ratios = _ratio("packed over spread", rows, "placement", "packed", "spread")
        one = next((r for r in rows if r["labels"].get("placement") == "one" and _ok(r)), None)
        for r in rows:  # each placement's efficiency against one GPU alone: E = X_N / (N X_1)
            if one is not None and _ok(r) and r["gpus"] and r["images_per_s"]:
                r["efficiency"] = r["images_per_s"] / (r["gpus"] * one["images_per_s"])
    elif g.suite == "ddp":
        g.ratios = (_ratio("deepspeed over ddp", rows, "engine", "deepspeed", "ddp")
                    + _ratio("fsdp2 over ddp", rows, "engine", "fsdp2", "ddp"))


def _paper_series(rows: list[dict[str, Any]]) -> dict[tuple[Any, str], list[dict[str, Any]]]:
    out: dict[tuple[Any, str], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["micro_batch"], r["labels"].get("placement", "packed")), []).append(r)
    return out


def paper_reference() -> dict[str, Any]:
    """The study's published figures, derived through the same metrics."""
    def series(s: paper.ScalingSeries) -> dict[str, Any]:
        return {"name": s.name, "cluster": s.cluster, "dataset": s.dataset, "placement": s.placement,
                "per_gpu_batch": s.per_gpu_batch, "measure": s.measure,
                "points": [asdict(p) for p in paper.derive(s)],
                "amdahl_serial_fraction": paper.amdahl_serial_fraction(s)}
    return {
        "citation": paper.CITATION,
        "strong": [series(s) for s in paper.SERIES.values()],
        "batch_2gpu_speedup": dict(paper.BATCH_SWEEP.stated_speedup_2gpu),
        "batch_best_tradeoff": list(paper.BATCH_SWEEP.best_tradeoff),
        "weak_efficiency": dict(paper.WEAK.stated_efficiency),
        "weak_share_per_gpu": paper.WEAK.share_per_gpu,
        "comm_share": {k: {"low": v.low, "high": v.high, "precision": v.precision}
                       for k, v in paper.COMM_SHARES.items()},
    }


def to_json(loaded: Loaded, groups: list[Group], compare_paper: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": results.SCHEMA_VERSION, "sources": loaded.files,
                           "skipped_lines": loaded.skipped,
                           "groups": [asdict(g) for g in groups]}
    if compare_paper:
        doc["paper"] = paper_reference()
    return doc
