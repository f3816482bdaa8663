"""What the store answers: a subject over time, repeat drains, relapses, drifts, what changed.

    series(conn, "node7")            # a node's verdict, drain and link figures per run; "node7:3" a GPU's figure
    drained(conn, times=3, days=30)  # nodes in the drain list at least `times` times in the window
    relapses(conn, days=7)           # nodes drained again within `days` of a run that found them in service
    drifts(conn)                     # every GPU and link whose last runs drift down (bench.history.drift)
    changed(conn, "node7")           # provenance that differs between its last good run and its latest

A window ends at `now` (default: the latest run in the store, so a store read
later answers as it did that night). Drift compares only runs of one
identity (level, model, precision, batch: the figures of another are not
comparable).
"""

from __future__ import annotations

import json
from collections import defaultdict

from bench.history import drift

LINKS = ("gpu", "intra", "inter")  # pairs change with the ring's order each night: a node's own figures drift


def latest_t(conn) -> float:
    row = conn.execute("SELECT MAX(t) FROM runs").fetchone()
    return row[0] or 0.0


def series(conn, subject: str) -> list[dict]:
    """Per validate run with this node or GPU, oldest first: time, run, verdict, drained, figures {kind: [value, rel]}."""
    host = subject.rpartition(":")[0] if ":" in subject else subject
    runs = conn.execute("SELECT r.run_id, r.time, r.level, n.verdict, n.drained, n.action FROM runs r JOIN nodes n "
                        "ON n.run_id = r.run_id WHERE n.host = ? ORDER BY r.t", (host,)).fetchall()
    figs: dict[str, dict] = defaultdict(dict)
    if ":" in subject:
        rows = conn.execute("SELECT run_id, kind, value, rel FROM figures WHERE kind = 'gpu' AND subject = ?", (subject,))
    else:
        rows = conn.execute("SELECT run_id, kind, value, rel FROM figures WHERE host = ? AND kind IN ('intra', 'inter')",
                            (host,))
    for run_id, kind, value, rel in rows:
        figs[run_id][kind] = [value, rel]
    return [{"run_id": r, "time": t, "level": lv, "verdict": v, "drained": bool(d), "action": a, "figures": figs.get(r, {})}
            for r, t, lv, v, d, a in runs]


def drained(conn, times: int = 3, days: float = 30, now: float | None = None) -> list[dict]:
    """Nodes in the drain list of at least `times` runs within `days` before now, the most drained first."""
    now = latest_t(conn) if now is None else now
    rows = conn.execute("SELECT n.host, r.time FROM nodes n JOIN runs r ON r.run_id = n.run_id WHERE n.drained = 1 "
                        "AND r.t >= ? AND r.t <= ? ORDER BY r.t", (now - days * 86400, now)).fetchall()
    by: dict[str, list[str]] = defaultdict(list)
    for host, t in rows:
        by[host].append(t)
    out = [{"host": h, "times": len(ts), "when": ts, "days": days} for h, ts in by.items() if len(ts) >= times]
    return sorted(out, key=lambda d: (-d["times"], d["host"]))


def relapses(conn, days: float = 7) -> list[dict]:
    """Nodes drained, then found in service (healthy or degraded) by a later run, then drained again within `days`
    of that run: each such return and the failure after it."""
    rows = conn.execute("SELECT n.host, r.t, r.time, n.verdict, n.drained FROM nodes n JOIN runs r ON r.run_id = "
                        "n.run_id ORDER BY n.host, r.t").fetchall()
    out, state = [], {}
    for host, t, stamp, verdict, was_drained in rows:
        st = state.setdefault(host, {"drained": None, "returned": None})
        if was_drained:
            back = st["returned"]
            if back is not None and t - back[0] <= days * 86400:
                out.append({"host": host, "drained": st["drained"], "returned": back[1], "failed_again": stamp,
                            "after_days": round((t - back[0]) / 86400, 2)})
            st["drained"], st["returned"] = stamp, None
        elif st["drained"] is not None and st["returned"] is None and verdict in ("healthy", "degraded"):
            st["returned"] = (t, stamp)
    return out


def _identity_runs(conn, identity: str | None, window: int) -> list[tuple[str, float]]:
    """The last `window` validate runs of this identity (the latest run's where None), oldest first."""
    if identity is None:
        row = conn.execute("SELECT identity FROM runs WHERE kind = 'validate' ORDER BY t DESC LIMIT 1").fetchone()
        identity = row[0] if row else None
    rows = conn.execute("SELECT run_id, time FROM runs WHERE kind = 'validate' AND identity IS ? ORDER BY t DESC "
                        "LIMIT ?", (identity, window)).fetchall()
    return rows[::-1]


def drifts(conn, window: int = drift.WINDOW, identity: str | None = None, now: dict | None = None) -> list[dict]:
    """Every GPU and link whose rel figure over the last runs drifts down. now: this run's {(kind, subject): (value,
    rel)}, not stored yet (bench validate asks before it writes), appended as the latest run."""
    runs = _identity_runs(conn, identity, window - (1 if now else 0))
    order = {r: i for i, (r, _) in enumerate(runs)}
    stamps = [t for _, t in runs] + (["this run"] if now else [])
    values: dict[tuple[str, str], dict[int, tuple]] = defaultdict(dict)
    if runs:
        marks = ", ".join("?" * len(runs))
        for run_id, kind, subject, host, gpu, value, rel in conn.execute(
                f"SELECT run_id, kind, subject, host, gpu, value, rel FROM figures WHERE run_id IN ({marks}) AND kind "
                f"IN ({', '.join('?' * len(LINKS))})", (*order, *LINKS)):
            values[(kind, subject)][order[run_id]] = (value, rel, host, gpu)
    for (kind, subject), (value, rel, host, gpu) in (now or {}).items():
        values[(kind, subject)][len(runs)] = (value, rel, host, gpu)
    found = []
    for (kind, subject), by_run in sorted(values.items()):
        if now and len(runs) not in by_run:
            continue  # not measured tonight: nothing to warn about in this run's rows
        idx = sorted(by_run)
        result = drift.test([by_run[i][1] for i in idx], window)
        if result and result["alarm"]:
            host, gpu = by_run[idx[-1]][2], by_run[idx[-1]][3]
            found.append({"kind": kind, "subject": subject, "host": host, "gpu": gpu, **result,
                          "history": [{"time": stamps[i], "value": by_run[i][0], "rel": by_run[i][1]} for i in idx]})
    return found


def provenance(conn, run_id: str, host: str) -> dict[str, str | None]:
    return dict(conn.execute("SELECT field, value FROM provenance WHERE run_id = ? AND host = ?", (run_id, host)))


def changed(conn, host: str, now: dict | None = None) -> dict | None:
    """For a node: its latest run (or now: this run's {"verdict", "provenance"}) against its last healthy run before,
    with every provenance field that differs; None where it has no such pair."""
    runs = conn.execute("SELECT r.run_id, r.time, n.verdict FROM runs r JOIN nodes n ON n.run_id = r.run_id WHERE "
                        "n.host = ? ORDER BY r.t", (host,)).fetchall()
    if now is None:
        if not runs:
            return None
        last_id, last_time, verdict = runs[-1]
        runs, prov = runs[:-1], provenance(conn, last_id, host)
    else:
        last_time, verdict, prov = "this run", now["verdict"], now.get("provenance") or {}
    good = next(((r, t) for r, t, v in reversed(runs) if v == "healthy"), None)
    if good is None:
        return None
    before = provenance(conn, good[0], host)
    fields = {f: [before.get(f), prov.get(f)] for f in sorted(set(before) | set(prov)) if before.get(f) != prov.get(f)}
    return {"host": host, "verdict": verdict, "time": last_time, "last_good": good[1], "last_good_run": good[0],
            "changed": fields, "known": bool(before) and bool(prov)}


def identity_of(ident: dict | None) -> str | None:
    return json.dumps(ident, sort_keys=True) if ident is not None else None


def trails(conn, hosts: list[str], identity: str | None, window: int = drift.WINDOW) -> dict[str, dict]:
    """Per node, its last runs of this identity, oldest first: {"times", "verdicts", "gpu_rel" (its slowest GPU over
    the run's median)}; nodes the store has not seen are left out."""
    runs = _identity_runs(conn, identity, window)
    if not runs or not hosts:
        return {}
    order = {r: i for i, (r, _) in enumerate(runs)}
    marks = ", ".join("?" * len(runs))
    want = set(hosts)
    out: dict[str, dict] = {}
    for run_id, host, verdict in conn.execute(f"SELECT run_id, host, verdict FROM nodes WHERE run_id IN ({marks})",
                                              tuple(order)):
        if host in want:
            out.setdefault(host, {})[order[run_id]] = [runs[order[run_id]][1], verdict, None]
    for run_id, host, rel in conn.execute(f"SELECT run_id, host, MIN(rel) FROM figures WHERE kind = 'gpu' AND run_id "
                                          f"IN ({marks}) GROUP BY run_id, host", tuple(order)):
        if host in out and order[run_id] in out[host]:
            out[host][order[run_id]][2] = rel
    return {h: {"times": [by[i][0] for i in sorted(by)], "verdicts": [by[i][1] for i in sorted(by)],
                "gpu_rel": [by[i][2] for i in sorted(by)]} for h, by in out.items()}
