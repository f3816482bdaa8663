"""What the ranks wrote to the shared directory, read back by the names the plan gives them, never by a listing.

    read_said(run_dir, "alone/rank3.json", 3, "node2")   # a file rank 3 said it wrote: retried, else MissingRecord
    rank_reports(run_dir, ranks, world)                  # how each rank ended: from bench's hub, else by name
    keep_ranks(run_dir, ranks)                           # ranks.json: bench's view of every rank of the launch
    make_dirs(run_dir, plan)                             # before the launch: the folders the ranks write into

A rank writes its figures to a temporary name in the same directory, fsyncs
and renames it (bench.core.results.write_json_atomic), then tells bench over
its connection (bench.core.conversation) that it ended well. bench has not
looked that name up before, so no cache of its client can say it is missing;
a client that did (a person's `ls`, a cache that lags) gets SAID_WAIT_S to
catch up, NFS's longest default (acdirmax, 60 s) and a margin. A file still
missing then is an error naming the rank, the file and its host: its figures
are not dropped in silence, nor the rank counted as if it had none.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from typing import Any

from bench.core.conversation import words
from bench.core.conversation.hub import RankState
from bench.core.results import write_json_atomic
from bench.core.storage import subdir

SAID_WAIT_S = 75.0
RETRY_S = 0.5


class MissingRecord(Exception):
    """A file a rank said it wrote is not there (or not whole JSON) after SAID_WAIT_S."""


def _load(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_said(run_dir: str, rel: str, rank: int, host: str | None, wait_s: float = SAID_WAIT_S) -> Any:
    """The JSON file rel of run_dir that rank said it wrote; retried for up to wait_s, then MissingRecord."""
    path = os.path.join(run_dir, rel)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _load(path)
        except (OSError, ValueError) as e:
            if time.monotonic() >= deadline:
                why = "not there" if isinstance(e, FileNotFoundError) else (
                    f"not whole JSON ({e})" if isinstance(e, ValueError) else f"unreadable ({e.strerror or e})")
                raise MissingRecord(f"rank {rank} on {host or '?'} said it wrote {path}, but after {wait_s:.0f} s "
                                    f"it is {why} here (the shared directory does not show this host what that "
                                    "one wrote: see docs/clusters.md)") from None
        time.sleep(RETRY_S)


def read_rank(run_dir: str, rel: str, rank: int, ranks: dict[int, RankState]) -> tuple[Any, str | None]:
    """(rank's file rel, None) when it is there; (None, why) when the rank said it wrote it and it is missing;
    (None, None) when the rank did not say so (it failed or went silent: one look, no wait)."""
    state = ranks.get(rank)
    if state is not None and state.status == "ok":
        try:
            return read_said(run_dir, rel, rank, state.host), None
        except MissingRecord as e:
            return None, str(e)
    try:
        return _load(os.path.join(run_dir, rel)), None
    except (OSError, ValueError):
        return None, None


def rank_reports(run_dir: str, ranks: dict[int, RankState], world: int) -> list[dict[str, Any]]:
    """How each rank that said so ended: what it told bench over its connection ({"rank", "host", "status": "ok"},
    or a failed rank's whole report), else its ranks/rank<R>.json read by name (a rank whose connection broke
    before it could say). A rank with neither is silent: not in the list."""
    out: list[dict[str, Any]] = []
    for rank in range(world):
        state = ranks.get(rank)
        if state is not None and state.status == "ok":
            out.append({"rank": rank, "host": state.host, "status": "ok"})
            continue
        if state is not None and isinstance(state.report, dict):
            out.append(state.report)
            continue
        try:
            got = _load(os.path.join(run_dir, "ranks", f"rank{rank}.json"))
        except (OSError, ValueError):
            continue
        if isinstance(got, dict):  # the rank of its name, never the one it says (bench.core.conversation.words)
            status = got.get("status") if got.get("status") in ("failed", "oom") else "failed"
            host = state.host if state is not None else str(got.get("host") or "?")[:255]
            out.append(words.report(got, rank, host, status)[0] or {})
    return out


def read_plan(run_dir: str) -> dict[str, Any]:
    """plan.json of the launch (bench wrote it), or {}."""
    try:
        got = _load(os.path.join(run_dir, "plan.json"))
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def make_dirs(run_dir: str, plan: dict[str, Any]) -> None:
    """The folders the ranks write into, made by bench before any rank starts: no rank's client then looks one up
    before it exists (a network filesystem may remember a missing name for a minute: NFS's lookupcache)."""
    for name in ("logs", "ranks", "flight", *(("alone",) if plan.get("independent") else ()),
                 *(part for part in ("numerics", "copies", "burn") if plan.get(part))):
        subdir(run_dir, name)


def keep_ranks(run_dir: str, ranks: dict[int, RankState]) -> None:
    """ranks.json: each rank's host, pid, the address its hello came from, when it said hello and began measuring,
    and how it ended (for a person, and for bench validate's start-up time); never fatal."""
    doc = {str(r): {k: v for k, v in asdict(s).items() if k not in ("answers", "report", "progress", "kept")} for r, s in sorted(ranks.items())}
    try:
        write_json_atomic(os.path.join(run_dir, "ranks.json"), doc)
    except Exception:  # noqa: BLE001 - the records matter more; storage.problem names a full disk
        pass
