"""`bench history import DIR...`: every record of results folders written before, into the store.

    import_dirs(conn, ["results/"])   # {"files", "stored", "already", "other", "skipped": ["file:line: why"]}

Each results.jsonl under the folders is read by bench.core.results.read (torn
lines skipped and named, another schema refused in one line); validate, run
and point (a sweep's) records are stored, each once by its run_id: importing
the same folder again adds nothing. Records of the launches inside a
validate (runs/*/results.jsonl: alone, numerics, comm) are the validate's
parts, not runs of their own, and are counted as other.
"""

from __future__ import annotations

from bench.core import results
from bench.history import store, write

KINDS = ("validate", "run", "point")


def import_dirs(conn, paths: list[str]) -> dict:
    out = {"files": 0, "stored": 0, "already": 0, "other": 0, "skipped": []}
    for path in results.iter_result_files(paths):
        got = results.read(path)
        out["files"] += 1
        out["skipped"] += got.skipped
        for rec in got.records:
            if rec.get("kind") not in KINDS or not rec.get("run_id"):
                out["other"] += 1
            elif write.keep(conn, rec):
                out["stored"] += 1
            else:
                out["already"] += 1
    write.prune(conn, store.keep_days())
    return out
