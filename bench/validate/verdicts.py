"""One verdict per node, with the action to take and what could not be checked, and the exit status from them.

    nodes = node_verdicts(v.checks, v.resources)
    nodes["node3"]   # {"verdict": "drain", "action": "reset-gpu: ...", "findings": [...], "not_checked": []}
    exit_status(nodes, v.checks)   # 0, 1 or 3

A node is
  drain     a row of it or of one of its GPUs FAILed (measured, and bad);
  unknown   nothing FAILed, but a check it was selected for did not reach it
            (an ERROR row: a launch that did not start, a stage that timed
            out, a tool that crashed; SKIP rows after such an ERROR, or of
            a check asked for that a stop kept from running);
  degraded  nothing FAILed and everything was checked, but a row WARNed;
  healthy   every check selected reached it and PASSed (or had nothing to check).
A pair's row ("a+b") carries no verdict of its own: its nodes' rows do. A
cluster row, or a leaf switch's `fabric` row, that FAILs names no node to drain, but the run failed (exit 1);
one that is an ERROR leaves every node still in unknown for that check.

Exit status (what a scheduler acts on): 1 when a node is to drain or a
cluster check FAILed, else 3 when a node is unknown (or any row is an
ERROR), else 0. Bad input is 2 before any of this runs.
"""

from __future__ import annotations

from typing import Any

from bench.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNKNOWN
from bench.validate import checks
from bench.validate.state import CLUSTER, LEFT_OUT, NOT_RUN, Check


VERDICTS = ("healthy", "degraded", "drain", "unknown")

# What to do when a check FAILs a node or GPU, where the row itself names no action (a health finding does:
# bench/data/health_actions.json): each check's and its other rows' (bench.validate.checks), and the baseline's
# rows (bench.validate.baseline). The words a sysadmin reads in the drain reason and the record.
CHECK_ACTION = {
    **{c.name: c.action for c in checks.REGISTRY if c.action},
    **{r.name: r.action for c in checks.REGISTRY for r in c.rows if r.action},
    "baseline": "drain: slower than the node was before (--baseline); find what changed",
}
UNKNOWN_ACTION = "validate again: some checks did not reach the node (see not_checked); fix what stopped them"
DEGRADED_ACTION = "watch: in service, but a figure or counter is off (see findings)"


def _action(c: Check) -> str:
    return c.action or CHECK_ACTION.get(c.check, "drain: see the reason")


def _row(c: Check) -> dict[str, Any]:
    return {"check": c.check, "gpu": c.gpu, "status": c.status, "reason": c.reason,
            **({"action": _action(c)} if c.status == "FAIL" else {"action": c.action} if c.action else {})}


def node_verdicts(checks: list[Check], resources: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """{host: {verdict, action, findings, not_checked}} for every selected host, in hostfile order."""
    cluster_errors = [c for c in checks if c.node == CLUSTER and c.status == "ERROR"]
    by_host: dict[str, list[Check]] = {}  # one pass over the rows, not one per host (hosts x rows)
    for c in checks:
        by_host.setdefault(c.host, []).append(c)
    out: dict[str, dict[str, Any]] = {}
    for host in resources:
        mine = by_host.get(host, [])
        fails = [c for c in mine if c.status == "FAIL"]
        warns = [c for c in mine if c.status == "WARN"]
        # Not reached: an ERROR, a SKIP after an ERROR, or a check asked for that a stop kept from running.
        missing = [c for c in mine if c.status == "ERROR" or
                   (c.status == "SKIP" and c.reason.startswith((f"{LEFT_OUT} an ERROR", NOT_RUN)))]
        not_checked = [{"check": c.check, "gpu": c.gpu, "reason": c.reason} for c in missing]
        if not fails and not any(c.status == "SKIP" and c.reason.startswith((LEFT_OUT, NOT_RUN)) for c in mine):
            # Still in at the end: a cluster-wide check that could not run did not reach it either.
            not_checked += [{"check": c.check, "gpu": None, "reason": c.reason} for c in cluster_errors]
        if fails:
            verdict, action = "drain", _action(fails[0])
        elif not_checked:
            verdict, action = "unknown", UNKNOWN_ACTION
        elif warns:
            verdict, action = "degraded", next((c.action for c in warns if c.action), DEGRADED_ACTION)
        else:
            verdict, action = "healthy", "none: in service"
        out[host] = {"verdict": verdict, "action": action, "findings": [_row(c) for c in fails + warns],
                     "not_checked": not_checked}
    return out


def exit_status(nodes: dict[str, dict[str, Any]], checks: list[Check]) -> int:
    """1 where a node is drained or a FAIL answers to no node (the cluster's, a fabric part's, a node pair's that no
    blamed node explains: 7 pairs at 0.1x on the real unhealthy H100 set passed with 0 before), 3 where something
    could not be checked, else 0."""
    verdicts = {n["verdict"] for n in nodes.values()}
    if "drain" in verdicts or any(c.status == "FAIL" and c.host is None for c in checks):
        return EXIT_FAILED
    if "unknown" in verdicts or any(c.status == "ERROR" for c in checks):
        return EXIT_UNKNOWN
    return EXIT_OK


def result(checks: list[Check]) -> str:
    """The run's one word: its worst row (SKIP rows aside)."""
    statuses = {c.status for c in checks}
    return next((s for s in ("FAIL", "ERROR", "WARN") if s in statuses), "PASS")
