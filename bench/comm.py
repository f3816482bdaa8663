"""`bench comm`: collective bandwidth between the ranks a run would use, with a correctness count.

    bench comm                                        # 2 local CPU ranks, gloo, all_reduce 1K..4M
    bench comm --op all_gather --sizes 4K:64M --gpus 8 --json
    bench comm --hostfile hostfiles/vector --sizes 1M,64M,256M --iters 20

Same launcher as `bench run` (DeepSpeed's runner, module bench.worker.comm).
Per size it reports the bytes S, the time of one collective (min, median,
max over the timed iterations; each iteration's time is the slowest rank's),
algbw and busbw as nccl-tests defines them (bench.metrics; METRICS.md,
"Collective benchmark"), and #wrong: values that differ from the exactly
known result (see bench/worker/comm.py). --sizes is the per-rank buffer: the
send buffer of all_gather, the output of reduce_scatter. NCCL on GPUs, gloo
on CPU. Exit: 0 ok, 1 a rank failed or a value was wrong, 2 bad input.

API: measure(resources, launcher, device, ...) -> a record of kind "comm";
its rows carry the figures, and row_cells() prints the same rows.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from bench import hostfile, launch, metrics, results
from bench.errors import EXIT_FAILED, BadInput

HELP = "measure collective bandwidth (algbw, busbw) and correctness between the ranks, as nccl-tests does"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
CPU_SIZES = "1K:4M"
GPU_SIZES = "1K:256M"
# Hidden test hook: this rank sends one wrong value, so a test can prove #wrong catches it.
CORRUPT_ENV = "BENCH_COMM_CORRUPT_RANK"
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^(\d+)([KMG]?)B?$", re.I)
COLUMNS = ("group", "size", "bytes", "min us", "median us", "max us", "algbw GB/s", "busbw GB/s", "#wrong")


def parse_size(text: str, option: str = "--sizes") -> int:
    m = _SIZE.match(text.strip())
    if not m or int(m[1]) == 0:
        raise BadInput(f"{option}: {text!r} is not a size (e.g. 4096, 64K, 16M, 1G)")
    return int(m[1]) * _UNITS[m[2].upper()]


def parse_sizes(text: str, option: str = "--sizes") -> list[int]:
    """'1K:4M' -> powers of two from 1K to 4M (nccl-tests -b/-e/-f 2); '4K,64K' -> those sizes."""
    if ":" in text:
        lo_text, _, hi_text = text.partition(":")
        lo, hi = parse_size(lo_text, option), parse_size(hi_text, option)
        if hi < lo:
            raise BadInput(f"{option}: {text!r} ends below where it starts")
        sizes = []
        while lo <= hi:
            sizes.append(lo)
            lo *= 2
        return sizes
    sizes = [parse_size(t, option) for t in text.split(",") if t.strip()]
    if not sizes:
        raise BadInput(f"{option}: no sizes in {text!r}")
    return sorted(set(sizes))


def human_bytes(n: float) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)}{unit}"
    return f"{int(n)}"


def row(op: str, n: int, size: int, times_s: list[float], wrong: int, group: str) -> dict[str, Any]:
    """One measured size as a JSON row; every figure from bench.metrics (METRICS.md)."""
    t = metrics.summary(times_s)
    nbytes = metrics.nccl_bytes(op, size, n)
    alg = metrics.algbw(nbytes, t.median)
    return {"group": group, "op": op, "ranks": n, "size": size, "bytes": nbytes, "iters": t.n,
            "time_s": {"min": t.min, "median": t.median, "max": t.max},
            "algbw": alg, "busbw": metrics.busbw(op, alg, n), "wrong": wrong}


def row_cells(r: dict[str, Any]) -> list[str]:
    """The printed row, from the JSON row (so the two cannot drift)."""
    t = r["time_s"]
    return [r["group"], human_bytes(r["size"]), f"{r['bytes']:.0f}", f"{t['min'] * 1e6:.1f}",
            f"{t['median'] * 1e6:.1f}", f"{t['max'] * 1e6:.1f}", f"{r['algbw'] / 1e9:.3g}",
            f"{r['busbw'] / 1e9:.3g}", str(r["wrong"])]


def rows_from_summary(summary: dict, op: str, group_names: list[str]) -> list[dict[str, Any]]:
    """Per group and size: each iteration's time is the slowest member's; #wrong adds over members."""
    groups = summary["groups"]
    out = []
    for gi, members in enumerate(groups):
        per_rank = [g["rows"] for r in summary["ranks"] for g in r["groups"] if g["group"] == gi]
        for k, first in enumerate(per_rank[0]):
            times = [max(rows[k]["times_s"][i] for rows in per_rank) for i in range(len(first["times_s"]))]
            wrong = sum(rows[k]["wrong"] for rows in per_rank)
            out.append(row(op, len(members), first["size"], times, wrong, group_names[gi]))
    return out


def measure(resources: dict[str, list[int]], launcher: str, device: str, *, op: str = "all_reduce",
            sizes: list[int], iters: int = 20, warmup: int = 5, out_root: str = "results",
            groups: list[list[int]] | None = None, group_names: list[str] | None = None,
            timeout: float = 120.0, slots_of: dict[str, int] | None = None,
            master_addr: str | None = None, master_port: int | None = None,
            environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Launch the comm ranks, wait, and return a "comm" record (also appended to its results.jsonl).

    groups: lists of global ranks measured one group after another (default:
    all ranks); group_names label them in the rows (default "all" / "g<i>").
    """
    from bench import provenance
    from bench.execute import execute

    if op not in OPS:
        raise BadInput(f"--op: must be one of {', '.join(OPS)}, got {op!r}")
    if iters < 1 or warmup < 0:
        raise BadInput(f"--iters/--warmup: need iters >= 1 and warmup >= 0, got {iters}/{warmup}")
    environ = dict(os.environ if environ is None else environ)
    world = sum(len(s) for s in resources.values())
    groups = groups or [list(range(world))]
    names = group_names or ["all" if len(g) == world else f"g{i}" for i, g in enumerate(groups)]
    run_id = results.new_run_id(out_root, prefix="comm-")
    run_dir = os.path.abspath(os.path.join(out_root, run_id))
    lp = launch.build(resources, launcher, run_dir, device, master_addr, master_port, environ=environ,
                      module="bench.worker.comm")
    plan = launch.plan_json(lp, resources, device, timeout)
    corrupt = environ.get(CORRUPT_ENV, "")
    spec = {"op": op, "sizes": sizes, "iters": iters, "warmup": warmup, "dtype": "float32",
            "groups": groups, "group_names": names,
            "corrupt_rank": int(corrupt) if corrupt.isdigit() else None}
    results.write_json_atomic(os.path.join(run_dir, "comm.json"), spec)
    results.write_json_atomic(os.path.join(run_dir, "plan.json"), plan)
    launch.write_files(lp, resources, slots_of)
    outcome = execute(lp, run_dir, timeout=timeout, show_progress=False)
    body: dict[str, Any] = {"run_id": run_id, "run_dir": run_dir, "duration_s": outcome.duration_s,
                            "comm": {k: v for k, v in spec.items() if k != "corrupt_rank"}, "plan": plan,
                            "provenance": provenance.collect(plan, outcome.summary)}
    status = outcome.status
    if status == "ok" and outcome.summary is not None:
        body["rows"] = rows_from_summary(outcome.summary, op, names)
        body["wrong"] = sum(r["wrong"] for r in body["rows"])
        if body["wrong"]:
            status = "failed"
            body["error"] = {"where": "check", "reason": f"{body['wrong']} wrong value(s) after {op}: "
                             "a rank received data other than what was sent (see the #wrong column)"}
    else:
        body["error"] = outcome.error or {"where": "launcher", "reason": "no summary"}
    rec = results.make_record("comm", status, **body)
    results.append(os.path.join(run_dir, "results.jsonl"), rec)
    return rec


def add_arguments(p) -> None:
    hostfile.add_host_arguments(p, num_gpus=False)
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="ranks per node (default: every GPU; 2 on a CPU-only node)")
    p.add_argument("--sizes", default=None, metavar="LO:HI|S,S",
                   help=f"per-rank buffer sizes: powers of two LO..HI, or a list (default {CPU_SIZES} on CPU, "
                   f"{GPU_SIZES} on GPUs)")
    p.add_argument("--op", choices=OPS, default="all_reduce", help="collective (default all_reduce)")
    p.add_argument("--iters", type=int, default=20, metavar="N", help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed iterations per size (default 5)")
    p.add_argument("--launcher", choices=("local", "pdsh", "openmpi", "slurm"), default=None,
                   help="pdsh (default with several hosts), openmpi, slurm; local for one node")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="cuda or cpu")
    p.add_argument("--out", default="results", help="results root; writes OUT/<run-id>/ (default results)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds without progress before the ranks are declared hung (default 120)")
    p.add_argument("--json", action="store_true", help="print the record on stdout and nothing else")


def _plan(args) -> tuple[dict[str, list[int]], dict[str, int] | None, str, str]:
    """(resources, hostfile slots, launcher, device), the way `bench run` plans them."""
    from argparse import Namespace

    from bench.config import RunConfig
    from bench.runner import plan_resources

    if args.gpus is not None and args.gpus < 1:
        raise BadInput(f"--gpus: must be > 0, got {args.gpus}")
    cfg = RunConfig(gpus=args.gpus, launcher=args.launcher, device=args.device)
    ns = Namespace(hostfile=args.hostfile, include=args.include, exclude=args.exclude, num_nodes=args.num_nodes)
    return plan_resources(cfg, ns)


def main(args) -> int:
    resources, slots_of, launcher, device = _plan(args)
    sizes = parse_sizes(args.sizes or (CPU_SIZES if device == "cpu" else GPU_SIZES))
    if launcher != "local":
        from bench.preflight import check_or_raise
        check_or_raise(list(resources), timeout=15.0)
    rec = measure(resources, launcher, device, op=args.op, sizes=sizes, iters=args.iters, warmup=args.warmup,
                  out_root=args.out, timeout=args.timeout, slots_of=slots_of)
    if args.json:
        print(json.dumps(rec))
    else:
        render(rec)
    return 0 if rec["status"] == "ok" else EXIT_FAILED


def render(rec: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    plan, spec = rec["plan"], rec["comm"]
    err = Console(stderr=True)
    title = (f"bench comm {rec['run_id']}: {spec['op']}, {plan['world_size']} rank(s) on {plan['nodes']} node(s), "
             f"{plan['device']} ({'nccl' if plan['device'] == 'cuda' else 'gloo'}), {spec['iters']} iterations"
             f" — {rec['status'].upper()}")
    table = Table(title=Text(title), title_justify="left")
    for c in COLUMNS:
        table.add_column(c, justify="left" if c == "group" else "right")
    for r in rec.get("rows", []):
        table.add_row(*row_cells(r), style="bold red" if r["wrong"] else None)
    Console().print(table)
    if rec.get("error"):
        e = rec["error"]
        err.print(Text(f"bench comm: [{e.get('where')}] {e.get('reason')}"))
        for line in e.get("log_tail") or []:
            err.print(Text(f"  {line}"))
    print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)
