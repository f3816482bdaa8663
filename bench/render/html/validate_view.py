"""A validate record as the page shows it: the verdict and counts, the grid's groups of cells, what to drain and how,
the rows to read without JavaScript, the rows about switches, the cluster's rows.

    view = validate_view(rec)    # a dict of plain values for templates/validate.html.j2

Cells are grouped by leaf switch where the record knows each node's leaf
(its "topology" object: {"source", "leaf_of": {host: leaf}, "up": {...}}),
else in hostfile order, one group. A row whose node is neither a node of
the record, a pair of them, nor the cluster (a leaf switch whose uplinks
fall short: check "fabric") is listed under "fabric / switches" and beside
its leaf's group, never dropped.
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from bench.core.scontrol import drain_argv, drain_reason
from bench.render.html.history_view import spark
from bench.render.html.node_data import hosts_of_row
from bench.render.html.page import VERDICT_STATUS
from bench.render.validate import NOT_ASKED, STATUSES, footer, summary

VERDICTS = ("drain", "unknown", "degraded", "healthy")
SHOWN_ROWS = 500  # rows that are not PASS printed into the page; the rest are in the node panels and the record
FOLDED = 20  # more nodes to drain than this: their table and lines are folded (a person reads the grid first)
BAD = ("FAIL", "ERROR", "WARN")


def leaf_of(rec: dict[str, Any]) -> dict[str, str] | None:
    topo = rec.get("topology")
    leaves = topo.get("leaf_of") if isinstance(topo, dict) else None
    return leaves if isinstance(leaves, dict) and leaves else None


def _worst(statuses: list[str]) -> str:
    order = {"FAIL": 4, "ERROR": 3, "WARN": 2, "PASS": 1, "SKIP": 0}
    return max(statuses, key=order.__getitem__) if statuses else "SKIP"


def cells(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """One per node, in hostfile order: its verdict, the checks it did not pass (the check filter's words)."""
    hosts = list(rec.get("hosts") or [])
    known = set(hosts)
    bad: dict[str, set[str]] = {h: set() for h in hosts}
    for c in rec.get("checks") or []:
        if c["status"] in BAD:
            for h in hosts_of_row(c, known):
                bad[h].add(c["check"])
    nodes = rec.get("nodes") or {}
    out = []
    for h in hosts:
        n = nodes.get(h) or {}
        verdict = n.get("verdict") or "unknown"
        trail = spark(rec, h)  # its earlier runs, where the history store had them (bench.history)
        out.append({"host": h, "verdict": verdict, "status": VERDICT_STATUS.get(verdict, "ERROR"),
                    "bad": " ".join(sorted(bad[h])), "spark": trail,
                    "title": f"{h}: {verdict}; {n.get('action') or ''}" + (f"; {trail['text']}" if trail else "")})
    return out


def groups(rec: dict[str, Any], fabric: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The grid's groups: by leaf switch (in the order their first node comes in the hostfile), else one group."""
    every = cells(rec)
    leaves = leaf_of(rec)
    if leaves is None:
        return [{"name": "hostfile order", "cells": every, "rows": [], "counts": Counter(c["verdict"] for c in every)}]
    by: dict[str, list[dict[str, Any]]] = {}
    for c in every:
        by.setdefault(str(leaves.get(c["host"]) or "no leaf given"), []).append(c)
    return [{"name": name, "cells": cs, "rows": [r for r in fabric if r["node"] == name or r.get("host") == name],
             "counts": Counter(c["verdict"] for c in cs)} for name, cs in by.items()]


def _grouped_by(leaves: dict[str, str] | None) -> str:
    """What the grid's groups are: leaf switches, NVLink domains (bench names those leaves "nvlink:<ClusterUUID>/
    <clique>", bench.cluster.nvlink_domains), both, or the hostfile's order."""
    if not leaves:
        return "hostfile order"
    kinds = {"NVLink domain" if str(x).startswith("nvlink:") else "leaf switch" for x in leaves.values()}
    return " / ".join(sorted(kinds, reverse=True))


def split_rows(rec: dict[str, Any]) -> tuple[list[dict], list[dict], list[dict]]:
    """(rows to read: not PASS and not a check not asked for, those about the cluster, those about switches or
    anything else that is not a node)."""
    known = set(rec.get("hosts") or [])
    shown, cluster, fabric = [], [], []
    for c in rec.get("checks") or []:
        if c["node"] == "cluster" and c.get("host") is None:
            cluster.append(c)
        elif not hosts_of_row(c, known):
            fabric.append(c)
        elif c["status"] != "PASS" and not (c["status"] == "SKIP" and (c.get("reason") or "").startswith(NOT_ASKED)):
            shown.append(c)
    return shown, cluster, fabric


def drain_lines(rec: dict[str, Any]) -> list[dict[str, str]]:
    """Per node to drain: the scontrol line bench ran (--drain) or would run, ready to paste into a shell."""
    entries = rec.get("drain") or []
    done = {d["host"]: d for d in rec.get("drained") or []}
    out = []
    for host in dict.fromkeys(e["host"] for e in entries):
        d = done.get(host)
        node, reason = (d["node"], d["reason"]) if d else (host, drain_reason(entries, host))
        out.append({"host": host, "line": shlex.join(drain_argv(node, reason)),
                    "said": (("drained" if d["drained"] else "NOT drained") + f": {d['scontrol']}") if d else ""})
    return out


def drain_nodes(rec: dict[str, Any]) -> list[dict[str, str]]:
    """One line per node to drain: its GPUs, its checks, and the reason Slurm would be given (every entry is in the
    node's panel)."""
    entries = rec.get("drain") or []
    out = []
    for host in dict.fromkeys(e["host"] for e in entries):
        mine = [e for e in entries if e["host"] == host]
        gpus = [str(e["gpu"]) for e in mine if e["gpu"] is not None]
        out.append({"host": host, "gpus": ", ".join(dict.fromkeys(gpus)) or "the node",
                    "checks": ", ".join(dict.fromkeys(e["check"] for e in mine)), "reason": drain_reason(entries, host)})
    return out


def scaling(rec: dict[str, Any]) -> dict[str, Any] | None:
    s = (rec.get("measured") or {}).get("scaling")
    if not isinstance(s, dict) or s.get("measured") is None:
        return None
    lo, hi = sorted(x for x in (s.get("predicted"), s.get("predicted_without_jitter")) if x is not None) or [None]
    return {**s, "low": lo, "high": hi if hi is not None else lo}


def validate_view(rec: dict[str, Any]) -> dict[str, Any]:
    shown, cluster, fabric = split_rows(rec)
    verdicts = Counter((n or {}).get("verdict") for n in (rec.get("nodes") or {}).values())
    known = set(rec.get("hosts") or [])
    about_nodes = {c["check"] for c in rec.get("checks") or [] if hosts_of_row(c, known)}
    checks = [s["check"] for s in summary(rec) if s["check"] in about_nodes]  # the check filter's choices
    return {
        "rec": rec, "statuses": STATUSES, "verdicts": VERDICTS, "verdict_counts": verdicts,
        "verdict_status": VERDICT_STATUS, "summary": summary(rec), "folded": FOLDED, "checks": checks,
        # The drain table says what footer's "drain:" line says.
        "footer": [line for line, _ in footer(rec) if not line.startswith("drain: ")],
        "drain_lines": drain_lines(rec), "drain_nodes": drain_nodes(rec),
        "groups": groups(rec, fabric), "grouped_by": _grouped_by(leaf_of(rec)),
        "topology_source": (rec.get("topology") or {}).get("source") if isinstance(rec.get("topology"), dict) else
        rec.get("topology"),
        "rows": shown[:SHOWN_ROWS], "rows_more": max(0, len(shown) - SHOWN_ROWS), "cluster_rows": cluster,
        "fabric_rows": fabric, "scaling": scaling(rec), "worst": _worst,
    }
