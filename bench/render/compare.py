"""bench compare's table: one row per subject and figure, from bench.analysis.compare's Result."""

from __future__ import annotations

import sys

from bench.analysis.compare import Result, stats

UNITS = {"images_per_s": ("img/s", 1.0), "busbw": ("MB/s", 1e-6), "step_s": ("ms", 1e3), "time_s": ("us", 1e6)}
STYLE = {"regressed": "bold red", "improved": "green", "same": None, "shown": "dim"}


def _side(xs: list[float], scale: float) -> str:
    st = stats(xs)
    if st["sd"] is None:
        return f"{st['mean'] * scale:.4g}"
    return f"{st['mean'] * scale:.4g} ±{st['sd'] * scale:.2g} (n={st['n']})"


def print_result(result: Result) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"bench compare: threshold {result.threshold:.0%}; a regression must also exceed the "
                             "run-to-run spread where both sides have repeats"), title_justify="left")
    for c in ("subject", "figure", "baseline", "new", "change", "spread", "verdict"):
        table.add_column(c, justify="left" if c in ("subject", "figure", "verdict") else "right")
    for r in result.rows:
        unit, scale = UNITS.get(r.figure, ("", 1.0))
        table.add_row(r.subject, f"{r.figure} ({unit})" if unit else r.figure, _side(r.base, scale),
                      _side(r.new, scale), f"{r.change:+.1%}" if r.change is not None else "-",
                      f"{r.spread:.1%}" if r.spread is not None else "-", r.verdict, style=STYLE.get(r.verdict))
    for x in result.outcomes:  # a subject that measured nothing on a side: its status is the figure
        table.add_row(x.subject, "status", x.base, x.new, "-", "-", x.verdict,
                      style="bold red" if x.verdict == "regressed" else "dim")
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    err = Console(stderr=True)
    for x in result.outcomes:  # the regressions are bench compare's own lines, with the exit status
        if x.verdict != "regressed":
            err.print(Text(f"bench compare: {x.verdict}: {x.subject}: {x.base} -> {x.new}: {x.reason}"), soft_wrap=True)
    for what, items in (("only in the baseline", result.only_base), ("only in the new", result.only_new),
                        ("not comparable (config differs)", result.incomparable)):
        if items:
            err.print(Text(f"bench compare: {what}: " + "; ".join(items[:5]) + (" ..." if len(items) > 5 else "")))
