"""bench validate's side of the store: drift and what-changed rows before its record, the record after.

    kept = before(v)            # the store opened; a WARN row per drifting GPU or link, and per moved node what
                                # changed since its last healthy run; one line on stderr where it cannot be read
    rec = record(v, ...)        # (bench.validate.stages) the record, appended to the run's folder first
    kept.keep(rec)              # the record into the store, retention applied; one line where it cannot be

The store is a record, never a dependency: absent, locked, full, of another
schema version or off (VITBENCH_HISTORY=off), the validate says so in one
line, at most one per run, and its rows, verdict, exit status and folder are
what they would be without it. Nothing here raises.
"""

from __future__ import annotations

import sqlite3
import sys

from bench.history import drift, queries, store, write
from bench.history.provenance import of_inventory

LINE = "bench validate: history not kept"
CHECKS = {"gpu": "drift", "intra": "drift-intra", "inter": "drift-inter"}
WHAT = {"gpu": "images/s", "intra": "intra-node busbw", "inter": "inter-node busbw"}
ACTION = ("watch it: a slow loss over its last runs, inside every night's line so far; check its clocks, cooling "
          "and firmware before it crosses the line (bench history show {subject})")


class Kept:
    """The open store of one validate (or none, said once)."""

    def __init__(self, conn=None, path: str | None = None, said: bool = False) -> None:
        self.conn, self.path, self.said = conn, path, said

    def say(self, why: str) -> None:
        if not self.said:
            print(f"{LINE}: {why}; the verdict and the run's folder stand", file=sys.stderr)
        self.said = True

    def keep(self, rec: dict) -> None:
        """The record into the store, then the retention. One line if it cannot be."""
        if self.conn is None:
            return
        try:
            write.keep(self.conn, rec)
            write.prune(self.conn, store.keep_days())
        except (sqlite3.Error, OSError) as e:
            self.say(store.said(e, self.path))
        except Exception as e:  # noqa: BLE001 - the store is never a dependency
            self.say(_first(e))
        finally:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - a store gone while closing: nothing was lost beyond what was said
                pass
            self.conn = None


def before(v) -> Kept:
    """Open the store (where VITBENCH_HISTORY says) and add this run's history rows to v."""
    path = store.where(None)
    if path is None:
        return Kept(said=True)
    try:
        kept = Kept(store.open_store(path), path)
    except store.Unavailable as e:
        kept = Kept(path=path)
        kept.say(str(e))
        return kept
    except Exception as e:  # noqa: BLE001
        kept = Kept(path=path)
        kept.say(_first(e))
        return kept
    try:
        add_rows(v, kept.conn)
    except (sqlite3.Error, OSError) as e:
        kept.say(store.said(e, path))
    except Exception as e:  # noqa: BLE001
        kept.say(_first(e))
    return kept


def now_figures(measured: dict) -> dict[tuple[str, str], tuple]:
    """This run's figures as queries.drifts takes them: {(kind, subject): (value, rel, host, gpu)}."""
    return {(kind, subject): (value, rel, host, gpu)
            for _, kind, subject, host, gpu, value, rel in write.figure_rows("now", measured) if kind in CHECKS}


def add_rows(v, conn) -> None:
    """A WARN per drift found over the stored runs and this one; per node with a WARN, FAIL or ERROR row whose
    provenance differs from its last healthy run's, a WARN naming the fields (a node already not healthy: its
    verdict is what it was)."""
    ident = queries.identity_of(v.identity())
    # Each node's earlier runs, for report.html's sparkline: in the record's measured figures as "history".
    v.figures["history"] = queries.trails(conn, list(v.resources), ident)
    for d in queries.drifts(conn, identity=ident, now=now_figures(v.figures)):
        trail = " ".join(f"{h['rel']:.3f}" for h in d["history"])
        v.add(CHECKS[d["kind"]], d["subject"], "WARN",
              value=f"{WHAT[d['kind']]} -{d['drop']:.1%} over its last {d['n']} runs (p {d['p']:.1g})",
              reference=drift.STATISTIC,
              reason=f"against each run's median, oldest first: {trail} (since {d['history'][0]['time']})",
              host=d["host"], gpu=d["gpu"], action=ACTION.format(subject=d["subject"]))
    moved = {c.host for c in v.checks if c.host and c.status in ("WARN", "FAIL", "ERROR")}
    for host in sorted(moved):
        prov = of_inventory((v.inventory or {}).get(host))
        what = queries.changed(conn, host, now={"verdict": "not healthy", "provenance": prov})
        if what is None or not what["known"] or not what["changed"]:
            continue
        fields = "; ".join(f"{f} {a} -> {b}" for f, (a, b) in what["changed"].items())
        v.add("changed", host, "WARN", value=fields, reference=f"its last healthy run, {what['last_good']}",
              reason="what differs from the last run that found it healthy (driver, firmware, image, kernel)",
              host=host)


def _first(e: BaseException) -> str:
    """Any other error (a PostgreSQL server's, a bug) as its type and first line: the one line."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"
