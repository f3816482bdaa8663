"""bench history's tables on the terminal, from the documents bench.commands.history builds (the same as --json).

    render("drift", {"drifts": [...], "statistic": "..."})

A GPU's or node's runs are a table and a one-line plot (a sparkline of its
figure over its runs against the run's median); drifts name the subject, its
loss, the test's p and the history behind it.
"""

from __future__ import annotations

import sys

BARS = "▁▂▃▄▅▆▇█"


def sparkline(xs: list[float | None]) -> str:
    """One character per value, scaled between the least and the most (a gap where none)."""
    known = [x for x in xs if x is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    span = hi - lo or 1.0
    return "".join(" " if x is None else BARS[min(len(BARS) - 1, int((x - lo) / span * len(BARS)))] for x in xs)


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[str(x) for x in r])
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def _drifts(doc: dict) -> None:
    rows = [[d["subject"], d["kind"], f"-{d['drop']:.1%}", f"{d['p']:.1g}", d["n"],
             sparkline([h["rel"] for h in d["history"]]), d["history"][0]["time"]] for d in doc["drifts"]]
    _table(f"drifts ({doc['statistic']})", ["subject", "figure", "loss", "p", "runs", "against the median", "since"],
           rows)


def _drained(doc: dict, times: int | None = None, days: float | None = None) -> None:
    rows = [[n["host"], n["times"], f"{n['days']:g} days", n["when"][-1]] for n in doc["drained"]]
    _table("nodes drained repeatedly", ["host", "drained", "window", "last"], rows)


def _relapses(doc: dict) -> None:
    rows = [[r["host"], r["drained"], r["returned"], r["failed_again"], r["after_days"]] for r in doc["relapses"]]
    _table("failed again after a return to service", ["host", "drained", "in service", "drained again", "days"], rows)


def _show(doc: dict) -> None:
    runs = doc["runs"]
    kinds = sorted({k for r in runs for k in r["figures"]})
    rows = [[r["time"], r["run_id"], r["verdict"], "yes" if r["drained"] else "",
             *[f"{r['figures'][k][0]:.4g} ({r['figures'][k][1]:.3f})" if k in r["figures"] else "-" for k in kinds]]
            for r in runs]
    _table(f"{doc['subject']}: {len(runs)} run(s)", ["time", "run", "verdict", "drained",
                                                       *[f"{k} (x median)" for k in kinds]], rows)
    for k in kinds:
        print(f"{k}: {sparkline([(r['figures'].get(k) or [None, None])[1] for r in runs])}")


def _changed(doc: dict) -> None:
    c = doc["changed"]
    if c is None:
        print(f"{doc['host']}: no healthy run before its latest in the store")
        return
    rows = [[f, a, b] for f, (a, b) in c["changed"].items()]
    _table(f"{c['host']}: {c['verdict']} at {c['time']}; last healthy {c['last_good']}",
           ["field", "then", "now"], rows or [["(nothing in its provenance)", "", ""]])


def render(action: str, doc: dict) -> None:
    if action == "import":
        for line in doc["skipped"]:
            print(line, file=sys.stderr)
        print(f"bench history import: {doc['stored']} record(s) stored from {doc['files']} file(s); "
              f"{doc['already']} already there, {doc['other']} not runs of their own")
    elif action == "show":
        _show(doc)
    elif action == "drained":
        _drained({"drained": doc["nodes"]})
    elif action == "relapses":
        _relapses(doc)
    elif action == "drift":
        _drifts(doc)
    elif action == "changed":
        _changed(doc)
    elif action == "prune":
        print(f"bench history prune: {doc['pruned']} run(s) older than {doc['keep_days']:g} days deleted")
    else:
        _drained(doc)
        _relapses(doc)
        _drifts(doc)
