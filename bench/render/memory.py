"""The memory suite's table and plot: memory per rank and throughput by strategy (bench report).

    table(group)      # one row per strategy (its plot, <sweep>-memory.png, is bench.render.plots.memory)

Each strategy's split of the ranks, T x P x D (tensor-parallel degree, pipeline
stages, data-parallel replicas), stands beside its figures, and TP's own
activation traffic per step. Model states are the tensors each rank holds in memory (measured; what
ZeRO-Infinity swapped out is "on NVMe", its swap files' size), beside the ZeRO
paper's formula and DeepSpeed's estimate; peak memory is the device's on
GPUs and the process's resident set on CPUs (docs/metrics.md says what each sees).
"""

from __future__ import annotations

from typing import Any

from bench.analysis import memory_report
from bench.analysis import report_analysis as ra


def _mb(x: Any) -> str:
    return "-" if x is None else f"{x / 1e6:,.2f} MB" if x < 1e7 else f"{x / 1e6:,.0f} MB"


def _batch(m: dict[str, Any] | None) -> str:
    if not m:
        return "-"
    if m["oom"] is None:
        return f">= {m['fits']}" if m["fits"] is not None else "-"
    return f"{m['fits'] if m['fits'] is not None else '<'} (oom {m['oom']})"


def table(g: ra.Group):
    from rich import box
    from rich.table import Table

    rows = memory_report.strategies(g.rows)
    models = ", ".join(sorted({s["model"] for s in rows if s.get("model")}))
    t = Table(title=f"{g.sweep}: memory per rank and throughput by strategy{' of ' + models if models else ''}, "
              "splits T x P x D side by side (docs/metrics.md)", box=box.SIMPLE_HEAVY, title_justify="left")
    for c in ("strategy", "status", "ranks", "T x P x D", "micro", "images/s", "model states", "on NVMe", "formula",
              "DeepSpeed est.", "peak memory", "comm share", "TP bytes/step", "max micro batch"):
        t.add_column(c, justify="left" if c in ("strategy", "status") else "right")
    for s in rows:
        states = (s["states"] or {}).get("total")
        peak = _mb(s["peak_memory_bytes"]) + (" rss" if s["memory_kind"] == "rss" else "")
        status = s["status"] if s["status"] == "ok" else f"[red]{s['status']}[/red]"
        t.add_row(s["strategy"], status, str(s["gpus"] or "-"), s.get("split") or "-", str(s["micro_batch"]),
                  "-" if s["images_per_s"] is None else f"{s['images_per_s']:,.1f}", _mb(states),
                  _mb(s["states_nvme"]), _mb((s["states_formula"] or {}).get("total")), _mb(s["states_deepspeed"]),
                  peak if s["peak_memory_bytes"] is not None else "-",
                  "null" if s["comm_share"] is None else f"{100 * s['comm_share']:.1f}%", _mb(s.get("comm_tp")),
                  _batch(s["max_batch"]))
    return t
