"""bench validate's table: a summary per check, every row that is not PASS (--all: every row), each node's verdict
and action, then what to drain.

At 100 nodes x 8 GPUs a row per check and GPU is thousands of rows: the
default view is one line per check (its counts, its worst row's value and
what judged it) and then only the rows a person must read (FAIL, WARN,
SKIP). The exclude line is printed only for what the verdict drains or
names a straggler. The JSON record keeps every row.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "ERROR": "magenta", "SKIP": "dim",
          "healthy": "green", "degraded": "yellow", "drain": "bold red", "unknown": "magenta"}
_ORDER = {"FAIL": 4, "ERROR": 3, "WARN": 2, "SKIP": 1, "PASS": 0}
STATUSES = ("PASS", "WARN", "FAIL", "ERROR", "SKIP")
NOT_ASKED = "not asked for"  # how the SKIP rows of a check not asked for begin (bench.validate.stages)


def summary(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Per check, in the order the checks ran: counts, and the worst row (worst status, then lowest figure)."""
    by_check: dict[str, list[dict]] = {}
    for c in rec["checks"]:
        by_check.setdefault(c["check"], []).append(c)
    out = []
    for check, rows in by_check.items():
        judged = [r for r in rows if r["status"] != "SKIP"] or rows
        worst = max(judged, key=lambda r: (_ORDER[r["status"]], -(r.get("figure") if r.get("figure") is not None
                                                                   else float("inf"))))
        counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
        status = max((r["status"] for r in rows), key=_ORDER.__getitem__) if rows else "SKIP"
        if status == "SKIP" and counts["PASS"]:
            status = "PASS"
        out.append({"check": check, "status": status, "rows": len(rows), "counts": counts, "worst": worst})
    return out


def render(rec: dict[str, Any], every_row: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console()
    c = rec["counts"]
    title = (f"bench validate {rec['run_id']} ({rec['level']}, {len(rec['hosts'])} host(s), {rec['device']}, "
             f"{rec.get('launcher')}): {rec['result']} — " + ", ".join(f"{c.get(k, 0)} {k}" for k in STATUSES))
    t = Table(title=Text(title), title_justify="left")
    for col in ("check", "rows", *STATUSES, "worst", "value", "judged by"):
        t.add_column(col, overflow="fold")
    for s in summary(rec):
        w = s["worst"]
        t.add_row(Text(s["check"], style=_STYLE[s["status"]]), str(s["rows"]),
                  *(str(s["counts"][k]) for k in STATUSES), Text(w["node"]),
                  Text(w["value"]), Text(w["reference"]))
    out.print(t)
    # Checks not asked for (not part of the level, or not in --checks) are in the summary's SKIP count only.
    shown = rec["checks"] if every_row else [ch for ch in rec["checks"] if ch["status"] != "PASS" and not
                                             (ch["status"] == "SKIP" and ch["reason"].startswith(NOT_ASKED))]
    if shown:
        rows = Table(title=Text("every row" if every_row else "rows that are not PASS (--all: every row)"),
                     title_justify="left")
        for col in ("check", "node", "status", "value", "reference", "reason"):
            rows.add_column(col, overflow="fold")
        for ch in shown:
            rows.add_row(Text(ch["check"]), Text(ch["node"]), Text(ch["status"], style=_STYLE[ch["status"]]),
                         Text(ch["value"]), Text(ch["reference"]), Text(ch["reason"]))
        out.print(rows)
    nodes = rec.get("nodes") or {}
    if nodes:
        n = Table(title=Text(f"nodes: exit {rec.get('exit_status')} (0 every node judged, none to drain; 1 drain; "
                             "3 a node unknown)"), title_justify="left")
        for col in ("node", "verdict", "action", "not checked"):
            n.add_column(col, overflow="fold")
        for host, x in nodes.items():
            missing = "; ".join(f"{m['check']}{'' if m['gpu'] is None else ' GPU ' + str(m['gpu'])}: {m['reason']}"
                                for m in x["not_checked"][:3])
            n.add_row(Text(host), Text(x["verdict"], style=_STYLE[x["verdict"]]), Text(x["action"]), Text(missing))
        out.print(n)
    for line, style in footer(rec):
        out.print(Text(line, style=style))
    print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)


def footer(rec: dict[str, Any]) -> list[tuple[str, str]]:
    """The lines under the table: the named straggler and what to drain, each with its --exclude; nothing else."""
    lines = []
    s = (rec.get("measured") or {}).get("straggler")
    if s:
        where = s["host"] + ("" if s["slot"] is None else f":{s['slot']}")
        lines.append((f"straggler: {s['kind']} {where} costs {s['cost']:.1%} of the cluster's throughput; to drop "
                      f"it: --exclude {s['exclude']}", "yellow"))
    if rec.get("drain"):
        what = ", ".join(f"{e['host']}{'' if e['gpu'] is None else ':' + str(e['gpu'])} ({e['check']})"
                         for e in rec["drain"])
        lines.append((f"drain: {what}; to run without them: --exclude {rec['exclude']}", "bold red"))
    unknown = rec.get("unknown") or []
    if unknown:
        lines.append((f"unknown (not checked, do not trust): {', '.join(unknown)}; to run without them and what "
                      f"drains: --exclude {rec['exclude']}", "magenta"))
    if rec.get("held"):
        lines.append((f"held, none drained: {rec['held']['reason']}", "bold red"))
    for d in rec.get("drained") or []:
        lines.append((f"scontrol: {d['node']} {'drained' if d['drained'] else 'NOT drained'}: {d['scontrol']}",
                      "bold red" if not d["drained"] else ""))
    for d in rec.get("resumed") or []:
        lines.append((f"scontrol: {d['node']} {'resumed' if d['resumed'] else 'not resumed'}: {d['why']}", ""))
    return lines


def one_line(rec: dict[str, Any]) -> str:
    """--level prolog or health on one node: one line, the verdict and the first reason (what a health check logs)."""
    level = rec["level"]
    ran = [ch for ch in rec["checks"] if ch["status"] != "SKIP"]
    if rec["result"] in ("FAIL", "ERROR"):
        bad = [ch for ch in rec["checks"] if ch["status"] == rec["result"]]
        first = bad[0]
        action = f" (action: {first['action']})" if first.get("action") and "action:" not in first["reason"] else ""
        more = f" (+{len(bad) - 1} more {rec['result']} row(s): --json or --all)" if bad[1:] else ""
        return (f"bench validate {level}: {rec['result']}: {first['check']} {first['node']}: {first['reason']}"
                f"{action}{more}")
    gpus = len({ch["node"] for ch in ran if ch.get("gpu") is not None})
    checks = ", ".join(dict.fromkeys(ch["check"] for ch in ran))
    warn = [ch for ch in ran if ch["status"] == "WARN"]
    return (f"bench validate {level}: {rec['result']}: {', '.join(rec['hosts'])}, {gpus} GPU(s)/rank(s): {checks}"
            + (f"; WARN {warn[0]['check']} {warn[0]['node']}: {warn[0]['reason']}" if warn else ""))
