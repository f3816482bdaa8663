"""The sweep engine: a suite's points run one after another, resumably (bench sweep SUITE).

    points = suites.plan("batch", cfg, opts, pool)
    done = open_sweep(sweep_dir, "batch", cfg, opts, pool, points)
    rc = run_points(points, hosts, sweep_dir, done, run_one=bench.jobs.train.run, view=progress)
    # run_one(config, hosts, Mode(quiet=True, out_dir=SWEEP/runs)) -> the point's run record

The folder's layout, what a resumed sweep skips and the exit statuses are
bench sweep's (bench/commands/sweep.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.cluster.hostfile import HostSelection
from bench.core import results, storage
from bench.core.config import RunConfig
from bench.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, BadInput, NoRoom, StorageFailed
from bench.experiments import suites
from bench.jobs.mode import Mode

DONE_STATUSES = ("ok", "oom")
# Fields that say where a point ran or how long bench waits, not what was measured.
_NOT_COMPARED = ("out", "timeout", "collective_timeout", "master_addr", "master_port")


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    # A field added to RunConfig since the sweep was planned: the older bench ran
    # without the option, i.e. with what is now its default.
    full = {**RunConfig().to_dict(), **config}
    return {k: v for k, v in full.items() if k not in _NOT_COMPARED}


def latest_by_point(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each point of one sweep's results.jsonl, by point id."""
    return {pid: r for (_, pid), r in results.latest_by_point(records).items()}


def open_sweep(sweep_dir: str, suite: str, cfg: RunConfig, opts: suites.SuiteOptions, pool: suites.Pool,
               points: list[suites.Point]) -> dict[str, dict[str, Any]]:
    """Write or check sweep.json; return the records already in results.jsonl by point id."""
    path = os.path.join(sweep_dir, "sweep.json")
    try:
        os.makedirs(sweep_dir, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out: cannot create {sweep_dir!r} ({e.strerror})") from None
    storage.check_room(sweep_dir, max((p.gpus for p in points), default=1))
    planned = [p.to_dict() for p in points]
    old_points: list[dict[str, Any]] = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise BadInput(f"{path}: unreadable sweep file ({e})") from None
        if old.get("suite") != suite:
            raise BadInput(f"{path}: this folder holds a {old.get('suite')!r} sweep, not {suite!r}; give --name")
        old_points = old.get("points", [])
        by_id = {p["id"]: p for p in old_points}
        for p in planned:
            if p["id"] in by_id and comparable(by_id[p["id"]]["config"]) != comparable(p["config"]):
                a, b = comparable(by_id[p["id"]]["config"]), comparable(p["config"])
                key = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
                raise BadInput(f"{path}: point {p['id']} was planned with {key}={a.get(key)!r}, now "
                               f"{b.get(key)!r}; resume with the same options, or give --name/--out for a new sweep")
    new_ids = {p["id"] for p in planned}
    # Points of an earlier plan stay listed: their records are part of the sweep.
    merged = planned + [p for p in old_points if p["id"] not in new_ids]
    results.write_json_atomic(path, {
        "schema_version": results.SCHEMA_VERSION, "kind": "sweep", "suite": suite,
        "name": os.path.basename(sweep_dir), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "base_config": cfg.to_dict(), "options": _opts_dict(opts),
        "pool": {"resources": pool.resources, "hostfile": pool.hostfile, "device": pool.device},
        "points": merged})
    rpath = os.path.join(sweep_dir, "results.jsonl")
    if not os.path.exists(rpath):
        return {}
    rr = results.read(rpath)
    for why in rr.skipped:
        print(f"bench sweep: {why}", file=sys.stderr)
    return latest_by_point(rr.records)


def _opts_dict(opts: suites.SuiteOptions) -> dict[str, Any]:
    return {k: getattr(opts, k) for k in opts.__slots__}


def point_hosts(point: suites.Point, hosts: HostSelection) -> HostSelection:
    """The host selection `bench run` gets for one point: its own slots on a hostfile pool."""
    if hosts.hostfile and point.include:
        return HostSelection(hostfile=hosts.hostfile, include=point.include)
    return HostSelection()


def point_record(point: suites.Point, run_rec: dict[str, Any], sweep_name: str) -> dict[str, Any]:
    body = {k: v for k, v in run_rec.items() if k not in ("schema_version", "kind", "status", "time")}
    return results.make_record("point", run_rec["status"], sweep=sweep_name, suite=point.suite,
                               point_id=point.id, labels=point.labels, **body)


def peek_done(sweep_dir: str) -> dict[str, dict[str, Any]]:
    rpath = os.path.join(sweep_dir, "results.jsonl")
    return latest_by_point(results.read(rpath).records) if os.path.exists(rpath) else {}


@dataclass
class _Progress:
    """Where a sweep stands while its points run: what is queued, recorded, launched and skipped."""

    points: list[suites.Point]
    done: dict[str, dict[str, Any]]
    sweep_dir: str
    queue: list[suites.Point] = field(default_factory=list)
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    launched: list[str] = field(default_factory=list)
    skipped: list[suites.Point] = field(default_factory=list)
    current: suites.Point | None = None

    def __post_init__(self) -> None:
        self.queue, self.latest = list(self.points), dict(self.done)
        self.skipped = [p for p in self.points if self.is_done(p.id, self.done)]

    @staticmethod
    def is_done(pid: str, records: dict[str, dict[str, Any]]) -> bool:
        return records.get(pid, {}).get("status") in DONE_STATUSES

    @property
    def results(self) -> str:
        return os.path.join(self.sweep_dir, "results.jsonl")

    def kept(self, verb: str) -> str:
        finished = sum(1 for q in self.points if self.is_done(q.id, self.latest))
        return (f"the sweep stopped {verb} point {self.current.id}; {finished} finished point(s) are kept in "
                f"{self.results}")


def run_points(points: list[suites.Point], hosts: HostSelection, sweep_dir: str, done: dict[str, dict[str, Any]],
               *, run_one: Callable[..., dict[str, Any] | None], view, as_json: bool = False,
               follow: Callable[[suites.Point, dict[str, dict[str, Any]]], list[suites.Point]] | None = None) -> int:
    """Run every point not yet done, appending each record as it finishes.

    view: start(point), finish(point, record), grow(n), close(), summary(dict) -- the
    progress a user sees (bench.render.progress.SweepProgress). follow(point, latest
    records): the points a finished (or already recorded) point asks for next, run
    right after it (suites.follow_ups: memory --find-max-batch's search); they join
    `points`, so the summary lists them.
    """
    state = _Progress(points, done, sweep_dir)
    view.begin(len(points), len(state.skipped),
               [r["duration_s"] for r in done.values() if isinstance(r.get("duration_s"), (int, float))])
    try:
        status = _run_queue(state, hosts, run_one, view, follow)
    except KeyboardInterrupt:
        status = "interrupted"
    except NoRoom as e:
        if not state.launched[:-1]:
            raise  # before any point of this invocation ran: bad input, exit 2
        raise StorageFailed(e.path, f"the file system filled during the sweep: {e.free_bytes // 1024} KiB free",
                            kept=state.kept("before")) from None
    except StorageFailed as e:
        # The sweep stops here; the point's own record (if it got one) goes to stdout as a point record.
        if e.record is not None and e.record.get("kind") == "run":
            e.record = point_record(state.current, e.record, os.path.basename(sweep_dir))
        e.kept = state.kept("at")
        raise
    finally:
        view.close()
    return _summarise(state, status, view, as_json)


def _run_queue(state: _Progress, hosts: HostSelection, run_one: Callable[..., dict[str, Any] | None], view,
               follow: Callable[[suites.Point, dict[str, dict[str, Any]]], list[suites.Point]] | None) -> str:
    """Run the queued points in order, each follow-up right after the point that asked for it: ok or interrupted."""
    name, runs_dir = os.path.basename(state.sweep_dir), os.path.join(state.sweep_dir, "runs")
    while state.queue:
        p = state.current = state.queue.pop(0)
        if not state.is_done(p.id, state.done):
            view.start(p)
            state.launched.append(p.id)
            rec = run_one(p.config, point_hosts(p, hosts), Mode(quiet=True, out_dir=runs_dir))
            if rec is None or rec["status"] == "interrupted":
                return "interrupted"
            prec = point_record(p, rec, name)
            results.append(state.results, prec)
            state.latest[p.id] = prec
            view.finish(p, prec)
        elif p not in state.skipped:
            state.skipped.append(p)  # a follow-up recorded by an earlier invocation
        more = [q for q in (follow(p, state.latest) if follow else []) if q.id not in {x.id for x in state.points}]
        if more:
            state.points = state.points + more
            state.queue[:0] = more
            view.grow(len(more))
    return "ok"


def _summarise(state: _Progress, status: str, view, as_json: bool) -> int:
    """The sweep's summary (to the view; with --json, the one document on stdout) and its exit status."""
    points = state.points
    if status != "interrupted" and any(state.latest.get(p.id, {}).get("status") == "failed" for p in points):
        status = "failed"
    summary = {"sweep": os.path.basename(state.sweep_dir), "suite": points[0].suite if points else None,
               "dir": state.sweep_dir, "status": status, "planned": len(points), "launched": state.launched,
               "skipped": [p.id for p in state.skipped], "points": [_brief(p, state.latest.get(p.id)) for p in points]}
    view.summary(summary)
    if as_json:
        print(json.dumps(summary))
    return {"ok": 0, "interrupted": EXIT_INTERRUPTED}.get(status, EXIT_FAILED)


def _brief(p: suites.Point, rec: dict[str, Any] | None) -> dict[str, Any]:
    fig = (rec or {}).get("figures") or {}
    return {"id": p.id, "status": rec["status"] if rec else "pending", "gpus": p.gpus,
            "images_per_s": fig.get("images_per_s"), "epoch_s": fig.get("epoch_s"),
            "duration_s": (rec or {}).get("duration_s"), "run_dir": (rec or {}).get("run_dir"),
            "reason": ((rec or {}).get("error") or {}).get("reason")}
