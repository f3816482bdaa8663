"""bench validate's table: every check per node, the named straggler, and the --exclude string that drops failed hosts."""

from __future__ import annotations

import os
import sys
from typing import Any


_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def render(rec: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console()
    c = rec["counts"]
    title = (f"bench validate {rec['run_id']} ({rec['level']}, {len(rec['hosts'])} host(s), {rec['device']}): "
             f"{rec['result']} — {c['FAIL']} FAIL, {c['WARN']} WARN, {c['PASS']} PASS, {c['SKIP']} SKIP")
    table = Table(title=Text(title), title_justify="left")
    for col in ("check", "node", "status", "value", "reference", "reason"):
        table.add_column(col, overflow="fold")
    for ch in rec["checks"]:
        table.add_row(Text(ch["check"]), Text(ch["node"]), Text(ch["status"], style=_STYLE[ch["status"]]),
                      Text(ch["value"]), Text(ch["reference"]), Text(ch["reason"]))
    out.print(table)
    for s in rec["measured"].get("stragglers", [])[:1]:
        out.print(Text(f"straggler: {s['kind']} {s['host']}{'' if s['slot'] is None else ':' + str(s['slot'])} costs "
                       f"{s['cost']:.1%} of the cluster's throughput; to drop it: --exclude {s['exclude']}"))
    if rec["failed_hosts"]:
        out.print(Text(f"failed: {', '.join(rec['failed_hosts'])}; to run without them: --exclude "
                       f"{'@'.join(rec['failed_hosts'])}", style="bold red"))
    print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)
