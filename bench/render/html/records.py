"""The records a page is made of, from any paths: validate records (with the folder each came from) and run or point
records, as bench report reads them (bench.core.results: torn lines named and skipped).

    found = load(["results/validate-...", "results/strong"])
    found.validates    # [(record, folder)], the last record of each validate run
    found.runs         # run and point records, for bench.analysis.report_analysis.group

A validate's own launches (its runs/ folder: the per-GPU runs, the
data-parallel run) are part of it, not runs of their own: records under a
folder that holds a validate record are left out. That is decided by
where the files lie, not by the run_dir the records name, so a results
folder copied from a cluster reads the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bench.core import results


@dataclass
class Found:
    validates: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def load(paths: list[str]) -> Found:
    out = Found()
    files: list[tuple[str, list[dict[str, Any]]]] = []
    for path in dict.fromkeys(results.iter_result_files(paths)):
        rr = results.read(path)
        out.skipped.extend(rr.skipped)
        files.append((path, rr.records))
    latest: dict[str, tuple[dict[str, Any], str]] = {}
    for path, recs in files:
        for r in recs:
            if r.get("kind") == "validate":
                latest[str(r.get("run_id"))] = (r, os.path.dirname(os.path.abspath(path)))
    out.validates = list(latest.values())
    inside = {folder + os.sep for _, folder in out.validates}
    for path, recs in files:
        where = os.path.abspath(path)
        if any(where.startswith(f) for f in inside):
            continue
        out.runs.extend(r for r in recs if r.get("kind") in ("run", "point"))
    return out
