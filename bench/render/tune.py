"""bench tune on screen: a line per trial while it runs, then the ranked table, the advice and the command.

    view = TuneProgress(budget=12)        # the sweep engine's view: begin, start, finish, close, summary
    print_tune(doc, Console())            # doc: tune.json
"""

from __future__ import annotations

import sys
from typing import Any


class TuneProgress:
    """One stderr line per trial (the sweep engine calls it once per trial)."""

    def __init__(self, budget: int | None, *, quiet: bool = False):
        self.budget, self.quiet, self.n = budget, quiet, 0

    def _say(self, line: str) -> None:
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)

    def begin(self, planned: int, already: int, past: list[float]) -> None:
        pass

    def start(self, p: Any) -> None:
        self.n += 1
        self._say(f"tune: trial {p.id}: running")

    def finish(self, p: Any, rec: dict[str, Any]) -> None:
        fig = rec.get("figures") or {}
        what = f"{fig['images_per_s']:,.1f} img/s" if fig else (rec.get("error") or {}).get("reason", "")
        secs = rec.get("duration_s")
        self._say(f"tune: trial {p.id}: {rec['status']} {what}" + (f" in {secs:.0f} s" if secs else ""))

    def close(self) -> None:
        pass

    def summary(self, s: dict[str, Any]) -> None:
        pass


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _mib(b: float | None) -> str:
    return "-" if not b else f"{b / 2**20:,.0f}"


def print_tune(doc: dict[str, Any], console) -> None:
    from rich.table import Table

    t = Table(title=f"bench tune {doc['name']}: {doc['status']}, {doc['budget']['spent_runs']} trial(s) "
                    f"({doc['budget']['spent_s']:.0f} s)")
    for col in ("#", "strategy", "ranks", "micro", "accum", "steps x runs", "img/s", "spread", "MFU",
                "MiB/rank", "comm", "eff vs 1"):
        t.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
    for r in doc["ranking"]:
        t.add_row(str(r["rank"]), r["strategy"], str(r["gpus"]), str(r["micro_batch"]), str(r["grad_accum"]),
                  f"{r['steps']} x {r['runs']}", f"{r['images_per_s']:,.1f}",
                  "-" if r["spread"] is None else f"{r['spread']:,.1f}", _pct(r["mfu"]),
                  _mib(r["peak_memory_bytes"]), _pct(r["comm_share"]), _pct(r["efficiency"]))
    console.print(t)
    notes = {r["mfu_reason"] for r in doc["ranking"] if r["mfu"] is None and r.get("mfu_reason")}
    notes |= {r["efficiency_reason"] for r in doc["ranking"] if r["efficiency"] is None and r["efficiency_reason"]}
    for n in sorted(notes):
        console.print(f"  - {n}", markup=False, highlight=False)
    ooms = [x for x in doc["trials"] if x["status"] != "ok"]
    if ooms or doc["pruned"]:
        console.print(f"{len(ooms)} trial(s) did not fit or failed, {len(doc['pruned'])} candidate(s) pruned "
                      "before running (reasons in tune.json)", markup=False, highlight=False)
    console.print(f"verdict: {doc['verdict']['verdict']}: {doc['verdict']['reason']}", markup=False, highlight=False)
    console.print(doc["recommendation"], markup=False, highlight=False)
    if doc["command"]:
        console.print("reproduce the winner:", markup=False, highlight=False)
        console.print(f"  {doc['command']}", markup=False, highlight=False, soft_wrap=True)
