"""`bench sweep SUITE`: run a suite's points one after another, resumably.

    bench sweep batch --gpus 2 --dataset synthetic --values 16,32,64 --steps 30
    bench sweep strong --hostfile hostfiles/vector --micro-batch 64 --epochs 1
    bench sweep paper --dry-run                 # the study's runs, listed, nothing launched
    bench sweep zero --gpus 2 --precisions bf16 --json

A sweep is one folder, OUT/<name>/ (name: --name, default the suite):
  sweep.json     the suite, the base config, the options and every planned point
  results.jsonl  one record (kind "point") per finished point, appended as it ends
  runs/<run-id>/ each point's run directory, as `bench run` writes it

Run the same command again and it resumes: a point whose latest record is
ok or oom is skipped (an OOM is a result: it will not fit next time either);
a failed point is run again (hosts go down and come back; the old record
stays, the report takes the latest). Ctrl-C keeps every finished point and
exits 130. A point whose id is planned again with another config (other
--steps, say) is refused: give --name or --out for a new sweep.

Exit: 0 every point ok or oom; 1 a point failed; 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

from bench import hostfile, results, suites
from bench.config import RunConfig, add_run_arguments, config_from_args
from bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, BadInput

HELP = "run a suite of points (" + ", ".join(suites.SUITES) + "); the same command again resumes"

DONE_STATUSES = ("ok", "oom")
# Fields that say where a point ran or how long bench waits, not what was measured.
_NOT_COMPARED = ("out", "timeout", "master_addr", "master_port")


def _csv(kind: type) -> Callable[[str], tuple]:
    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if kind is int:
            bad = [t for t in items if not t.isdigit() or int(t) < 1]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad[0]!r} is not a whole number >= 1")
            return tuple(int(t) for t in items)
        return tuple(items)
    return parse


def add_arguments(p) -> None:
    p.add_argument("suite", choices=suites.SUITES, metavar="SUITE", help="one of: " + ", ".join(suites.SUITES))
    add_run_arguments(p)
    hostfile.add_host_arguments(p, num_gpus=False)
    g = p.add_argument_group("sweep")
    g.add_argument("--values", type=_csv(str), default=None, metavar="LIST",
                   help="the swept values: micro batches (batch, paper), accumulation steps (accum), "
                        "ZeRO variants 0,1,2,3,2+offload,3+offload (zero)")
    g.add_argument("--gpu-counts", type=_csv(int), default=None, metavar="LIST",
                   help="GPU (rank) counts, e.g. 1,2,4; default: the suite's, up to the pool")
    g.add_argument("--precisions", type=_csv(str), default=None, metavar="LIST",
                   help="zero: precisions (default fp32,bf16 on CPU, fp32,fp16,bf16 on GPU)")
    g.add_argument("--senses", type=_csv(str), default=suites.SENSES, metavar="LIST",
                   help="strong: fixed-global (textbook: global batch fixed), study (per-GPU batch fixed)")
    g.add_argument("--global-batch", type=int, default=None, metavar="N",
                   help="strong fixed-global: the global batch (default: micro batch x the largest count)")
    g.add_argument("--base-fraction", type=float, default=None, metavar="F",
                   help="weak: data share per GPU (default the study's 0.10, or 1/N when that is smaller)")
    g.add_argument("--name", default=None, help="sweep folder name under --out (default: the suite)")
    g.add_argument("--dry-run", action="store_true", help="list the points and launch nothing")
    g.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")


def make_pool(cfg: RunConfig, args) -> suites.Pool:
    """The resources the host options select, exactly as `bench run` would resolve them."""
    from bench.runner import plan_resources

    resources, _, _, device = plan_resources(cfg, args)
    return suites.Pool(resources=resources, hostfile=bool(getattr(args, "hostfile", None)), device=device)


def options_from_args(args) -> suites.SuiteOptions:
    return suites.SuiteOptions(values=args.values, gpu_counts=args.gpu_counts, precisions=args.precisions,
                               senses=tuple(args.senses), global_batch=args.global_batch,
                               base_fraction=args.base_fraction)


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    # A field added to RunConfig since the sweep was planned: the older bench ran
    # without the option, i.e. with what is now its default.
    full = {**RunConfig().to_dict(), **config}
    return {k: v for k, v in full.items() if k not in _NOT_COMPARED}


def latest_by_point(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each point_id (a failed point run again has several)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("kind") == "point" and "point_id" in r:
            out[r["point_id"]] = r
    return out


def open_sweep(sweep_dir: str, suite: str, cfg: RunConfig, opts: suites.SuiteOptions, pool: suites.Pool,
               points: list[suites.Point]) -> dict[str, dict[str, Any]]:
    """Write or check sweep.json; return the records already in results.jsonl by point id."""
    path = os.path.join(sweep_dir, "sweep.json")
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


def point_args(point: suites.Point, args) -> argparse.Namespace:
    """The host options `bench run` gets for one point."""
    hf = getattr(args, "hostfile", None)
    return argparse.Namespace(hostfile=hf, include=point.include or "", exclude="", num_nodes=-1)


def point_record(point: suites.Point, run_rec: dict[str, Any], sweep_name: str) -> dict[str, Any]:
    body = {k: v for k, v in run_rec.items() if k not in ("schema_version", "kind", "status", "time")}
    return results.make_record("point", run_rec["status"], sweep=sweep_name, suite=point.suite,
                               point_id=point.id, labels=point.labels, **body)


def main(args) -> int:
    cfg = config_from_args(args)
    pool = make_pool(cfg, args)
    opts = options_from_args(args)
    name = args.name or args.suite
    if not name or "/" in name or name in (".", ".."):
        raise BadInput(f"--name: {name!r} is not a folder name")
    sweep_dir = os.path.abspath(os.path.join(cfg.out, name))
    runs_dir = os.path.join(sweep_dir, "runs")
    points = suites.plan(args.suite, cfg.replace(out=runs_dir), opts, pool)
    if args.dry_run:
        from bench.sweep_view import print_plan
        done = _peek_done(sweep_dir)
        print_plan(args.suite, sweep_dir, points, done, as_json=args.json)
        return 0
    done = open_sweep(sweep_dir, args.suite, cfg, opts, pool, points)
    from bench.runner import run
    rc = run_points(points, args, sweep_dir, done, run_one=run, as_json=args.json)
    if not args.json and os.path.exists(os.path.join(sweep_dir, "results.jsonl")):
        from bench.report import print_paths
        print_paths([os.path.join(sweep_dir, "results.jsonl")])
    return rc


def _peek_done(sweep_dir: str) -> dict[str, dict[str, Any]]:
    rpath = os.path.join(sweep_dir, "results.jsonl")
    return latest_by_point(results.read(rpath).records) if os.path.exists(rpath) else {}


def run_points(points: list[suites.Point], args, sweep_dir: str, done: dict[str, dict[str, Any]], *,
               run_one: Callable[..., dict[str, Any] | None], as_json: bool = False) -> int:
    """Run every point not yet done, appending each record as it finishes."""
    from bench.sweep_view import SweepProgress

    name = os.path.basename(sweep_dir)
    rpath = os.path.join(sweep_dir, "results.jsonl")
    runs_dir = os.path.join(sweep_dir, "runs")
    skipped = [p for p in points if done.get(p.id, {}).get("status") in DONE_STATUSES]
    todo = [p for p in points if p not in skipped]
    past = [r["duration_s"] for r in done.values() if isinstance(r.get("duration_s"), (int, float))]
    # Progress goes to stderr even with --json: stdout holds only the JSON document.
    view = SweepProgress(name, len(points), len(skipped), past, quiet=False)
    launched: list[str] = []
    latest = dict(done)
    status = "ok"
    try:
        for p in todo:
            view.start(p)
            launched.append(p.id)
            rec = run_one(p.config, point_args(p, args), quiet=True, out_dir=runs_dir)
            if rec is None or rec["status"] == "interrupted":
                status = "interrupted"
                break
            prec = point_record(p, rec, name)
            results.append(rpath, prec)
            latest[p.id] = prec
            view.finish(p, prec)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        view.close()
    if status != "interrupted" and any(latest.get(p.id, {}).get("status") == "failed" for p in points):
        status = "failed"
    summary = {"sweep": name, "suite": points[0].suite if points else None, "dir": sweep_dir, "status": status,
               "planned": len(points), "launched": launched, "skipped": [p.id for p in skipped],
               "points": [_brief(p, latest.get(p.id)) for p in points]}
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
