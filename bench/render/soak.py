"""bench validate --soak's report: per GPU and per link over the rounds, what went bad and when; one plot per check.

The table lists first what went bad and stayed bad (with the round it
began), then what failed in some round, then the widest spreads; clean
subjects are counted, not listed. plot() draws each tracked figure over the
rounds, one line per GPU or link, failed rounds marked with a cross.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_UNIT = {"throughput": (1.0, "images/s"), "matmul": (1e12, "TFLOP/s"), "intra-node": (1e6, "busbw MB/s"),
         "inter-node": (1e6, "busbw MB/s")}


def _fmt(check: str, x: float | None) -> str:
    if x is None:
        return "-"
    scale, _ = _UNIT.get(check, (1.0, ""))
    return f"{x / scale:.3g}"


def render(rec: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console()
    rows = rec["trends"]
    shown = [t for t in rows if t["not_pass_rounds"] or (t["spread"] or 0) > 0.25]
    title = (f"bench validate --soak {rec['run_id']}: {rec['result']} — {rec['rounds']} round(s), "
             f"{rec['elapsed_s']:.0f} of {rec['soak_duration_s']:.0f} s; {rec['stopped']}; "
             f"{len(rows) - len(shown)} of {len(rows)} GPU/link figures clean")
    t = Table(title=Text(title), title_justify="left")
    for col in ("check", "node", "rounds", "min", "median", "max", "spread", "worst round", "failed rounds",
                "bad since round", "last"):
        t.add_column(col, overflow="fold")
    for r in shown:
        t.add_row(r["check"], r["node"], str(r["rounds"]), _fmt(r["check"], r["min"]), _fmt(r["check"], r["median"]),
                  _fmt(r["check"], r["max"]), "-" if r["spread"] is None else f"{r['spread']:.0%}",
                  str(r["worst_round"] or "-"), ", ".join(map(str, r["failed_rounds"])) or "-",
                  str(r["since"] or "-"), r["last_status"])
    out.print(t)
    for r in rows:
        if r["since"] is not None:
            out.print(Text(f"{r['check']} {r['node']}: not PASS from round {r['since']} on "
                           f"({r['last_status']} in the last)", style="bold red"))
    print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)


def plot(path: str, rec: dict[str, Any]) -> str:
    """Each tracked figure over the rounds: one panel per check, one line per subject, FAILs crossed."""
    from bench.render.plots import _plt, _save

    plt = _plt()
    checks = [c for c in _UNIT if any(t["check"] == c and t["median"] is not None for t in rec["trends"])]
    fig, axes = plt.subplots(len(checks) or 1, 1, figsize=(9, 2.8 * max(len(checks), 1)), squeeze=False)
    for ax, check in zip(axes[:, 0], checks):
        scale, unit = _UNIT[check]
        for t in (t for t in rec["trends"] if t["check"] == check):
            pts = [(k, v / scale) for k, v, _ in t["points"] if v is not None]
            if not pts:
                continue
            (line,) = ax.plot([k for k, _ in pts], [v for _, v in pts], marker=".", label=t["node"])
            bad = [(k, v / scale) for k, v, s in t["points"] if s == "FAIL" and v is not None]
            if bad:
                ax.plot([k for k, _ in bad], [v for _, v in bad], "x", color=line.get_color(), markersize=9)
        ax.set_title(f"{check}: {unit} per round (x: FAIL)", fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6, ncol=4)
    fig.suptitle(f"bench validate --soak {rec['run_id']} ({rec['rounds']} rounds)", fontsize=10)
    return _save(plt, fig, path)
