"""bench comm's table: one row per group and size, printed from the record's rows (so print and JSON agree)."""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.analysis.comm_figures import TIMING
from bench.core.sizes import human_bytes

COLUMNS = ("group", "size", "bytes", "k", "min us", "median us", "max us", "algbw GB/s", "busbw GB/s", "#wrong")


def row_cells(r: dict[str, Any]) -> list[str]:
    """The printed row, from the JSON row (so the two cannot drift)."""
    t = r["time_s"]
    return [r["group"], human_bytes(r["size"]), f"{r['bytes']:.0f}", str(r.get("back_to_back", 1)),
            f"{t['min'] * 1e6:.1f}",
            f"{t['median'] * 1e6:.1f}", f"{t['max'] * 1e6:.1f}", f"{r['algbw'] / 1e9:.3g}",
            f"{r['busbw'] / 1e9:.3g}", str(r["wrong"])]


def render(rec: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    plan, spec = rec["plan"], rec["comm"]
    err = Console(stderr=True)
    title = (f"bench comm {rec['run_id']}: {spec['op']}, {plan['world_size']} rank(s) on {plan['nodes']} node(s), "
             f"{plan['device']} ({'nccl' if plan['device'] == 'cuda' else 'gloo'}), {spec['iters']} samples a size"
             f" — {rec['status'].upper()}")
    table = Table(title=Text(title), title_justify="left")
    for c in COLUMNS:
        table.add_column(c, justify="left" if c == "group" else "right")
    for r in rec.get("rows", []):
        table.add_row(*row_cells(r), style="bold red" if r["wrong"] else None)
    Console().print(table)
    err.print(Text(f"bench comm: {TIMING}"))
    if rec.get("error"):
        e = rec["error"]
        err.print(Text(f"bench comm: [{e.get('where')}] {e.get('reason')}"))
        for line in e.get("log_tail") or []:
            err.print(Text(f"  {line}"))
    print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)
