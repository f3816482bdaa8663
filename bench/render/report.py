"""bench report's tables: each sweep's points, its scaling series beside the study's, and the study's own figures."""

from __future__ import annotations

import sys
from typing import Any

from bench.analysis import report_analysis as ra


def print_paths(paths: list[str], compare_paper: bool = False) -> None:
    """The tables of these records on stdout (`bench sweep` ends with its own)."""
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    for g in ra.group(ra.load(paths).records):
        print_group(console, g, compare_paper)


# --- rendering (every number comes from the analysis) ------------------------

def _f(x: Any, fmt: str, scale: float = 1.0, unit: str = "") -> str:
    return "-" if not isinstance(x, (int, float)) else f"{x * scale:{fmt}}{unit}"


def _pct(x: Any) -> str:
    return _f(x, ".1f", 100, "%")


def points_table(g: ra.Group):
    from rich import box
    from rich.table import Table

    t = Table(title=f"{g.sweep} ({g.suite}): {len(g.rows)} point(s)", box=box.SIMPLE_HEAVY, title_justify="left")
    for c in ("point", "status", "gpus", "batch", "images/s", "step", "epoch", "comm", "peak mem", "train acc",
              "test acc"):
        t.add_column(c, justify="left" if c in ("point", "status") else "right")
    for r in g.rows:
        batch = f"{r['micro_batch']}x{r['grad_accum']}" + (f"={r['global_batch']}" if r["global_batch"] else "")
        mem = _f(r["peak_memory_bytes"], ",.0f", 2**-20, " MiB") + (" rss" if r["memory_kind"] == "rss" else "")
        status = r["status"] if r["status"] == "ok" else f"[red]{r['status']}[/red]"
        t.add_row(str(r["id"]), status, str(r["gpus"] or "-"), batch, _f(r["images_per_s"], ",.1f"),
                  _f(r["step_s"], ".1f", 1000, " ms"),
                  _f(r["epoch_s"], ",.2f", 1, " s" if r.get("epoch_measured") else " s est."),
                  _pct(r["comm_share"]), mem, _pct(r["train_acc"]),
                  _pct(r["test_acc"]))
    return t


def _mb(x: Any) -> str:
    return _f(x, ",.3f", 1e-6, " MB")


def _short(point_id: Any) -> str:
    return str(point_id).split("/", 1)[-1]


def comm_table(g: ra.Group):
    """Per point: bytes a rank sends per step, measured and analytic, and the time a collective was in flight."""
    from rich import box
    from rich.table import Table

    t = Table(title=f"{g.sweep}: communication per rank and optimizer step (docs/metrics.md)", box=box.SIMPLE,
              title_justify="left")
    for c in ("point", "sent (algorithm)", "wire", "analytic", "formula", "measured/analytic", "in flight", "share",
              "E = X/(N X1)", "ops (sent)"):
        t.add_column(c, justify="left" if c in ("point", "formula", "ops (sent)") else "right")
    for r in g.rows:
        if r["status"] != "ok":
            continue
        ops = ", ".join(f"{op} {_mb(v)}" for op, v in sorted(r["comm_ops"].items()) if v)
        t.add_row(_short(r["id"]), _mb(r["comm_bytes"]), _mb(r.get("comm_wire")), _mb(r["comm_bytes_analytic"]),
                  r["comm_formula"] or "-",
                  _f(r["comm_over_analytic"], ".2f", 1, "x"), _f(r["comm_s"], ".1f", 1000, " ms"),
                  _pct(r["comm_share"]) if r["comm_share"] is not None else "null", _pct(r.get("efficiency")), ops)
    return t


def memory_table(g: ra.Group):
    """Per point: model-state bytes per rank, measured from the tensors, the ZeRO paper's, DeepSpeed's estimate."""
    from rich import box
    from rich.table import Table

    t = Table(title=f"{g.sweep}: model states per rank (docs/metrics.md)", box=box.SIMPLE, title_justify="left")
    for c in ("point", "measured", "params", "grads", "master", "optimizer", "formula", "DeepSpeed est.",
              "buffers"):
        t.add_column(c, justify="left" if c == "point" else "right")
    for r in g.rows:
        if r["status"] != "ok" or not r["states"]:
            continue
        s, f = r["states"], r["states_formula"] or {}
        t.add_row(_short(r["id"]), _mb(s.get("total")), _mb(s.get("params")), _mb(s.get("grads")),
                  _mb(s.get("master_params")), _mb(s.get("optimizer_states")), _mb(f.get("total")),
                  _mb(r["states_deepspeed"]), _mb(s.get("buffers")))
    return t


def scaling_table(s: dict[str, Any], study: dict[str, Any] | None = None):
    from rich import box
    from rich.table import Table

    title = s["series"]
    if s.get("amdahl_serial_fraction") is not None:
        title += f"  (Amdahl fit: serial fraction f = {s['amdahl_serial_fraction']:.4f})"
    if s.get("note"):
        title += f"  ({s['note']})"
    t = Table(title=title, box=box.SIMPLE, title_justify="left")
    weak = s["kind"] == "weak"
    cols = ["GPUs", f"T epoch ({s.get('epoch', 'estimated')})", "images/s"] + (["E_w = T1/TN"] if weak else ["S = T1/TN", "E = S/N", "Karp-Flatt"])
    if study:
        cols += [f"study T ({study['name']})", "study S", "study E"]
    for c in cols:
        t.add_column(c, justify="right")
    ref = {p["gpus"]: p for p in (study or {}).get("points", [])}
    for p in s["points"]:
        cells = [str(p["gpus"]), _f(p["seconds"], ",.2f", 1, " s"), _f(p["images_per_s"], ",.1f")]
        if weak:
            cells.append(_pct(p["weak_efficiency"]))
        else:
            cells += [_f(p["speedup"], ".2f", 1, "x"), _pct(p["efficiency"]), _f(p["karp_flatt"], ".4f")]
        if study:
            q = ref.get(p["gpus"])
            cells += [_f(q and q["seconds"], ",.2f", 1, " s"), _f(q and q["speedup"], ".2f", 1, "x"),
                      _pct(q and q["efficiency"])]
        t.add_row(*cells)
    return t


def paper_batch_speedup(s: dict[str, Any]) -> float | None:
    """The study's stated 2-GPU speedup at this series' batch size, where it gave one."""
    return ra.paper_reference()["batch_2gpu_speedup"].get(s.get("micro_batch"))


def _study_for(s: dict[str, Any]) -> dict[str, Any] | None:
    """The study's series a strong-scaling series of ours lines up with (its Vector T4 runs)."""
    if s["kind"] != "strong" or not any(w in s["series"] for w in ("study", "paper")):
        return None
    name = "vector-inter" if "spread" in s["series"] else "vector-intra"
    return next(x for x in ra.paper_reference()["strong"] if x["name"] == name)


def print_group(console, g: ra.Group, compare_paper: bool) -> None:
    console.print(points_table(g))
    if g.suite == "memory":
        from bench.render import memory
        console.print(memory.table(g))
    if g.suite in ("zero", "ddp", "placement", "memory") or any(r["states"] for r in g.rows if g.suite == "runs"):
        console.print(comm_table(g))
        console.print(memory_table(g))
        for r in g.rows:
            if r["status"] == "ok" and r["comm_share"] is None and r["comm_share_reason"]:
                console.print(f"  {r['id']}: communication time null: {r['comm_share_reason']}", markup=False,
                              highlight=False)
    for s in g.scaling:
        console.print(scaling_table(s, _study_for(s) if compare_paper else None))
        stated = paper_batch_speedup(s) if compare_paper else None
        if stated is not None:
            console.print(f"  the study: 2-GPU speedup {stated:.2f}x at batch {s['micro_batch']}", highlight=False)
    for r in g.ratios:
        console.print(f"  {r['comparison']} at {r['gpus']} GPU(s): {r['speedup']:.2f}x  (S = T_slow / T_fast, "
                      f"epochs {r.get('epoch', 'estimated')})")
    failed = [r for r in g.rows if r["status"] not in ("ok",)]
    for r in failed:
        console.print(f"  {r['id']}: {r['status']}: {r['reason'] or ''}", markup=False, highlight=False)


def print_paper(console, ref: dict[str, Any]) -> None:
    console.print(f"[bold]The study[/bold]: {ref['citation']}")
    for s in ref["strong"]:
        pts = ", ".join(f"{p['gpus']}: {p['speedup']:.2f}x/{p['efficiency'] * 100:.0f}%" for p in s["points"])
        console.print(f"  {s['name']} ({s['placement']}, {s['dataset'] or 'dataset not stated'}): {pts}; "
                      f"Amdahl f = {s['amdahl_serial_fraction']:.4f}", highlight=False)
    b = ", ".join(f"batch {k}: {v:.2f}x" for k, v in ref["batch_2gpu_speedup"].items())
    console.print(f"  batch sweep, 2-GPU speedup: {b}; best trade-off at {ref['batch_best_tradeoff']}",
                  highlight=False)
    w = ", ".join(f"{k} GPUs: about {v * 100:.0f}%" for k, v in ref["weak_efficiency"].items())
    console.print(f"  weak scaling ({ref['weak_share_per_gpu'] * 100:.0f}% of the data per GPU): {w}",
                  highlight=False)
    c = "; ".join(f"{k}: {v['low'] * 100:.0f}%" + (f"-{v['high'] * 100:.0f}%" if v["high"] else "+") +
                  f" ({v['precision']})" for k, v in ref["comm_share"].items())
    console.print(f"  all-reduce share of a step: {c}", highlight=False)
