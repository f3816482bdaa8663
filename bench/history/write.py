"""A record into the store: its run, nodes, figures, rows and provenance, in one transaction; retention.

    keep(conn, rec)            # True: stored; False: that run_id is stored already (an import again), or no run_id
    prune(conn, days, now)     # runs older than days, and everything keyed by them, deleted; the count

A validate record gives every table; a run, point (a sweep's), comm or soak
record gives its run row and its top-level figures (kind run, subject its
kind). A node is "drained" in a run where it is in the record's drain list.
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import datetime
from typing import Any

from bench.history.schema import CHILDREN

FIGURES = (("gpu", "gpu_images_per_s"), ("intra", "intra_busbw"), ("inter", "node_busbw"), ("pair", "pair_busbw"))


def epoch(stamp: str) -> float:
    """A record's time ("2026-12-06T20:54:26+0000") as seconds since the epoch."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (TypeError, ValueError):
        return datetime.fromisoformat(str(stamp)).timestamp()


def figure_rows(run_id: str, measured: dict) -> list[tuple]:
    """(run_id, kind, subject, host, gpu, value, rel) of every GPU, node link and pair the run measured."""
    out = []
    for kind, key in FIGURES:
        values = {s: float(x) for s, x in (measured.get(key) or {}).items()
                  if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0}
        if not values:
            continue
        mid = statistics.median(values.values())
        for subject, x in values.items():
            host, gpu = subject, None
            if kind == "gpu" and ":" in subject:
                host, _, slot = subject.rpartition(":")
                gpu = int(slot) if slot.isdigit() else None
            elif kind == "pair":
                host = None
            out.append((run_id, kind, subject, host, gpu, x, x / mid if mid > 0 else None))
    return out


def _run_figures(run_id: str, rec: dict) -> list[tuple]:
    figs = rec.get("figures") or {}
    return [(run_id, f"run:{k}", rec.get("kind", "run"), None, None, float(x), None) for k, x in figs.items()
            if isinstance(x, (int, float)) and not isinstance(x, bool)]


def rows(rec: dict[str, Any]) -> dict[str, list[tuple]]:
    """The record as rows of each table (bench.history.schema)."""
    run_id = rec["run_id"]
    ident = rec.get("identity")
    out: dict[str, list[tuple]] = {
        "runs": [(run_id, rec.get("kind"), rec.get("status"), rec.get("time"), epoch(rec.get("time")),
                  rec.get("result"), rec.get("exit_status"), rec.get("level"),
                  json.dumps(ident, sort_keys=True) if ident is not None else None, rec.get("run_dir"))],
        "nodes": [], "figures": [], "checks": [], "provenance": []}
    if rec.get("kind") != "validate":
        out["figures"] = _run_figures(run_id, rec)
        return out
    drained = {e.get("host") for e in rec.get("drain") or []}
    out["nodes"] = [(run_id, h, n.get("verdict"), n.get("action"), int(h in drained))
                    for h, n in (rec.get("nodes") or {}).items()]
    out["figures"] = figure_rows(run_id, rec.get("measured") or {})
    out["checks"] = [(run_id, c.get("check"), c.get("node"), c.get("status"), *_words(c), c.get("host"), c.get("gpu"))
                     for c in rec.get("checks") or []]
    out["provenance"] = [(run_id, h, f, None if x is None else str(x))
                         for h, fields in (rec.get("nodes_provenance") or {}).items() for f, x in fields.items()]
    return out


def _words(c: dict) -> tuple[str | None, str | None]:
    """A row's value and reason where it is not PASS or SKIP; a PASS row's words are its figure (kept in figures)
    and the line it passed, the same every night: 8,000 GPUs' of them were 19 MB a run, 7 GB a year of nights."""
    if c.get("status") in ("PASS", "SKIP"):
        return None, None
    return str(c.get("value") or ""), str(c.get("reason") or "")


INSERT = {"runs": 10, "nodes": 5, "figures": 7, "checks": 8, "provenance": 4}


def keep(conn, rec: dict[str, Any]) -> bool:
    """Store one record in one transaction (BEGIN IMMEDIATE: a second writer waits its busy timeout)."""
    if not rec.get("run_id") or not rec.get("time"):
        return False
    tables = rows(rec)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (rec["run_id"],)).fetchone():
            conn.execute("ROLLBACK")
            return False
        for table, n in INSERT.items():
            if tables[table]:
                conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * n)})", tables[table])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True


def prune(conn, days: float | None, now: float | None = None) -> int:
    """Delete the runs older than days (None: keep every run) and their rows; how many runs went."""
    if days is None:
        return 0
    cut = (time.time() if now is None else now) - days * 86400
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = "SELECT run_id FROM runs WHERE t < ?"
        for table in CHILDREN:
            conn.execute(f"DELETE FROM {table} WHERE run_id IN ({old})", (cut,))
        gone = conn.execute("DELETE FROM runs WHERE t < ?", (cut,)).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return gone
