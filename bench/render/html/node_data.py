"""What a node's cell opens, for every node of a validate record: its rows, its health findings, its best pair.

    data = node_data(rec)      # {"s": [strings], "cols": [...], "rows": [[...]], "nodes": {host: {...}}}

Packed into the page (bench.render.html.page.packed) and read by its
script when a person opens a cell. At 1,000 nodes x 8 GPUs that is 57,000
rows: each distinct string is kept once (a check's reference repeats on
every row of it) and a row is a list of indexes into them. A pair's row
("a+b") is listed under both its nodes. A FAIL row that names no action
takes the one its node's verdict gives it (bench.validate.verdicts: the
action a sysadmin reads in the drain reason).
"""

from __future__ import annotations

from typing import Any

COLS = ("check", "node", "status", "value", "reference", "reason", "action", "figure", "gpu")


class Strings:
    """Each distinct string once; its index in its place."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.list: list[str] = []

    def __call__(self, text: str | None) -> int:
        text = text or ""
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.list)
            self.list.append(text)
        return i


def hosts_of_row(c: dict[str, Any], hosts: set[str]) -> list[str]:
    """The nodes a row is about: its host, the node of a GPU ("host:slot"), both ends of a pair ("a+b"); none for
    the cluster, a switch or anything else that is not one of the record's nodes."""
    if c.get("host") in hosts:
        return [c["host"]]
    node = c.get("node") or ""
    if node in hosts:
        return [node]
    if "+" in node:
        ends = node.split("+")
        if all(e in hosts for e in ends):
            return ends
    return []


def _actions(rec: dict[str, Any]) -> dict[tuple[str, str, Any], str]:
    """(host, check, gpu) -> the action its node's verdict gives a row that FAILed."""
    return {(h, f["check"], f.get("gpu")): f.get("action") or ""
            for h, n in (rec.get("nodes") or {}).items() for f in n.get("findings") or []}


def best_pairs(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each node's best pair: the other end and its bus bandwidth (the pairs' rounds, bisection's pairs included)."""
    out: dict[str, dict[str, Any]] = {}
    for name, bw in ((rec.get("measured") or {}).get("pair_busbw") or {}).items():
        ends = name.split("+")
        if len(ends) != 2 or not isinstance(bw, (int, float)):
            continue
        for me, other in (ends, ends[::-1]):
            if me not in out or bw > out[me]["busbw"]:
                out[me] = {"with": other, "busbw": bw}
    return out


def _findings(report: dict[str, Any]) -> dict[str, Any]:
    keep = ("code", "severity", "action", "meaning", "what", "gpu_index", "port", "count")
    return {"findings": [{k: f.get(k) for k in keep} for f in report.get("findings") or []],
            "read": report.get("read") or {}, "not_read": [f"{x.get('source')}: {x.get('reason')}"
                                                             for x in report.get("not_read") or []]}


def node_data(rec: dict[str, Any], burn_pictures: dict[str, str] | None = None) -> dict[str, Any]:
    """burn_pictures: {host: the id of the page element holding its burn curves}, for the nodes drawn."""
    hosts = list(rec.get("hosts") or [])
    known = set(hosts)
    s = Strings()
    actions = _actions(rec)
    rows: list[list[Any]] = []
    mine: dict[str, list[int]] = {h: [] for h in hosts}
    for c in rec.get("checks") or []:
        about = hosts_of_row(c, known)
        if not about:
            continue
        action = c.get("action") or ""
        if c["status"] == "FAIL" and not action:
            action = actions.get((about[0], c["check"], c.get("gpu")), "")
        rows.append([s(c["check"]), s(c["node"]), s(c["status"]), s(c.get("value")), s(c.get("reference")),
                     s(c.get("reason")), s(action), c.get("figure"), c.get("gpu")])
        for h in about:
            mine[h].append(len(rows) - 1)
    measured = rec.get("measured") or {}
    health = measured.get("health") or {}
    best = best_pairs(rec)
    verdicts = rec.get("nodes") or {}
    nodes = {}
    for h in hosts:
        n = verdicts.get(h) or {}
        nodes[h] = {"rows": mine[h], "verdict": n.get("verdict"), "action": n.get("action"),
                    "not_checked": [f"{x['check']}{'' if x.get('gpu') is None else ' GPU ' + str(x['gpu'])}: "
                                    f"{x.get('reason')}" for x in n.get("not_checked") or []],
                    "health": _findings(health[h]) if h in health else None, "best_pair": best.get(h),
                    "burn": (burn_pictures or {}).get(h)}
    return {"cols": list(COLS), "s": s.list, "rows": rows, "nodes": nodes}
