"""How bench validate's own work grows from 8 to 8,000 GPUs, with nothing launched: every phase after the ranks.

    .venv/bin/python benchmarks/validate_scale.py                            # 1, 10, 100, 1,000 nodes x 8 GPUs
    .venv/bin/python benchmarks/validate_scale.py --nodes 1,10,100 --levels quick --repeats 5

For each size and level (quick: ring pairs; full: the ring and 4 random
matchings past 16 nodes) it runs `bench validate` in-process
(bench.validate.stages.validate, over a hostfile of N nodes with 8 slots
each) with every launch replaced by tests/scale_fixtures.py's answers in
the real launches' shapes: preflight's HostCheck, the probe's inventory
and health report (recorded H200 x8 node and health outputs), the per-GPU
runs, the numerics job, the links' comm record (its rows made by bench's
own rows_from_summary) and the data-parallel run. One node in a hundred
is bad (a slow GPU, a slow NIC, a numerics mismatch, a health finding in
turn), so the rows that fail, the second looks, bisection and the drain
are on the path. Then what `bench validate --json --junit F --drain-file
D --metrics-file M` does with the record: schema validation, the metrics
file, JUnit, and the terminal table (rendered to nothing).

Each phase's seconds (time.perf_counter, less the time spent making the
synthetic answers) are the median of --repeats runs where the size is
small; a second table gives the same in CPU seconds (time.process_time:
what the phase cost whatever else shared the two cores). The growth
columns are the ratio per 10x GPUs beside what N log N would give
(10 log 10N / log N): a phase above it, and over 20 ms, is marked "!".
One node has no pairs and nothing to drain, and only 1,000 nodes plant
every kind of fault (a slow NIC's second look and bisection among them):
800 to 8,000 GPUs is the ratio to read. At 1,000 nodes the heap is about
1 GB and a collection of the cyclic GC over it is paid by whichever phase
allocates when one is due; --no-gc turns it off to see each phase's own
growth.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.validate.stages import STAGES  # noqa: E402
from benchmarks._common import machine, parse_smoke, save_json  # noqa: E402
from tests import scale_fixtures  # noqa: E402

# Read from bench's own list, not copied: a copy missed the copies stage when it landed, and the first size
# stopped with a KeyError.
STAGE_NAMES = tuple(name for name, _ in STAGES)
# The phases in the order bench runs them; a sub-phase (indented) is part of the phase above it.
PHASES = ("prepare", *STAGE_NAMES, "record", "  node verdicts", "  drain list+file", "append", "schema", "metrics",
          "junit", "render")
SUB = {"  links' rows": "rows_from_summary inside the link launches (part of intra-node and inter-node)"}
MIN_FLAGGED_S = 0.02  # below this, a ratio is the timer's and the interpreter's noise


class Phases:
    """Wall (time.perf_counter) and CPU (time.process_time) seconds per phase: each wrapped call's, less the
    synthetic answers made inside it."""

    def __init__(self, cluster: scale_fixtures.Cluster):
        self.cluster = cluster
        self.seconds, self.cpu = dict.fromkeys((*PHASES, "whole"), 0.0), dict.fromkeys((*PHASES, "whole"), 0.0)

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            c = self.cluster
            made, made_cpu, t0, c0 = c.synthetic_s, c.synthetic_cpu_s, time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t0 - (c.synthetic_s - made)
                self.cpu[name] += time.process_time() - c0 - (c.synthetic_cpu_s - made_cpu)
        return timed

    def call(self, name: str, fn, *args, **kwargs):
        return self.wrap(name, fn)(*args, **kwargs)


@contextlib.contextmanager
def patched(pairs):
    """Set (object, attribute, value) triples; the old values back afterwards."""
    old = [(o, k, getattr(o, k)) for o, k, _ in pairs]
    try:
        for o, k, v in pairs:
            setattr(o, k, v)
        yield
    finally:
        for o, k, v in reversed(old):
            setattr(o, k, v)


def one(nodes: int, level: str) -> dict:
    """One validate of `nodes` nodes: {phase: seconds}, and what it judged."""
    from bench.cluster.hostfile import HostSelection
    from bench.core import results
    from bench.render import junit, metrics_file
    from bench.render.validate import render
    from bench.validate import drain, stages, verdicts
    from bench.validate.config import ValidateConfig

    cluster = scale_fixtures.Cluster(nodes)
    ph = Phases(cluster)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        fakes: list = []
        cluster.install(lambda o, k, v: fakes.append((o, k, v)))
        stack.enter_context(patched([
            *fakes, (stages, "STAGES", tuple((n, ph.wrap(n, f)) for n, f in stages.STAGES)),
            (stages, "prepare", ph.wrap("prepare", stages.prepare)),
            (stages, "record", ph.wrap("record", stages.record)),
            (verdicts, "node_verdicts", ph.wrap("  node verdicts", verdicts.node_verdicts)),
            (drain, "drain_list", ph.wrap("  drain list+file", drain.drain_list)),
            (drain, "write_drain_file", ph.wrap("  drain list+file", drain.write_drain_file)),
            (results, "append", ph.wrap("append", results.append))]))
        cfg = ValidateConfig(level=level, out=os.path.join(tmp, "results"), junit=os.path.join(tmp, "validate.xml"),
                             drain_file=os.path.join(tmp, "drain.txt"))
        hosts = HostSelection(hostfile=cluster.hostfile(tmp))
        t0, c0 = time.perf_counter(), time.process_time()
        rec = stages.validate(cfg, hosts)
        stack.close()
        ph.call("schema", results.validate, rec)
        ph.call("metrics", metrics_file.write, os.path.join(tmp, "vitbench.prom"), rec)
        ph.call("junit", junit.write, cfg.junit, rec["checks"], duration_s=rec["duration_s"])
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            ph.call("render", render, rec)
        ph.seconds["whole"] = time.perf_counter() - t0 - cluster.synthetic_s
        ph.cpu["whole"] = time.process_time() - c0 - cluster.synthetic_cpu_s
    drained = {(e["host"], e["gpu"], e["check"]) for e in rec["drain"]}
    return {"seconds": {**ph.seconds, "  links' rows": cluster.rows_s},
            "cpu": {**ph.cpu, "  links' rows": cluster.rows_cpu_s}, "rows": len(rec["checks"]),
            "nodes": len(rec["nodes"]), "drain_hosts": len({h for h, _, _ in drained}),
            "drain_as_planted": drained == scale_fixtures.expected_drain(cluster.bad), "launches": cluster.launches,
            "exit": rec["exit_status"], "result": rec["result"]}


def nlogn(n: int) -> float:
    """What N log N grows by when N grows 10x."""
    return 10 * math.log(10 * n) / math.log(n) if n > 1 else float("inf")


def table(level: str, sizes: list[int], got: dict[int, dict], what: str = "seconds") -> list[str]:
    """Each phase's seconds per size, then its growth per 10x GPUs beside N log N's; "!" where it grew faster."""
    gpus = [8 * n for n in sizes]
    steps = [f"x{b // a} to {b:,} (NlogN {nlogn(a):.1f})" for a, b in zip(gpus, gpus[1:])]
    head = f"{level + (' CPU s' if what == 'cpu' else ' wall s'):22s}" + "".join(f"{g:>10,d}" for g in gpus) + \
        "".join(f"  {s:>26s}" for s in steps)
    lines = [head, "-" * len(head)]
    for name in [*PHASES, *SUB, "whole"]:
        row = [got[n][what].get(name, 0.0) for n in sizes]
        growth = ""
        for i in range(len(row) - 1):
            ratio = row[i + 1] / row[i] if row[i] > 0 else float("inf")
            faster = ratio > nlogn(gpus[i]) and row[i + 1] >= MIN_FLAGGED_S and not name.startswith("  ")
            growth += f"  {ratio:>24.1f} {'!' if faster else ' '}"
        lines.append(f"{name:22s}" + "".join(f"{x:10.4f}" for x in row) + growth)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="1,10,100,1000", help="node counts (8 GPUs each), comma-separated")
    p.add_argument("--levels", default="quick,full")
    p.add_argument("--repeats", type=int, default=None,
                   help="runs per size, the median kept (default: 5 up to 10 nodes, else 3: at 1,000 nodes a "
                        "collection of the cyclic GC over a 1 GB heap lands in whichever phase sets it off)")
    p.add_argument("--no-gc", action="store_true",
                   help="the cyclic collector off while measuring: each phase's own growth, without the pauses "
                        "that land in whichever phase allocates when a collection over the whole heap is due")
    p.add_argument("--json", metavar="FILE", help="write every run's phases as JSON too")
    # 10 nodes: the smallest size with a bad node, so pairs, a second look and the drain are on the path.
    args = parse_smoke(p, argv, dict(nodes="1,10", repeats=1))
    sizes = [int(x) for x in args.nodes.split(",")]
    print(machine(), flush=True)
    print(f"uptime load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    scale_fixtures.node_template(), scale_fixtures.health_templates()  # parsed once, outside every timing
    for level in args.levels.split(","):
        one(1, level)  # imports, the schema's validator, rich: paid once per process, not by the first size
    if args.no_gc:
        gc.disable()
    every: dict[str, dict[int, dict]] = {}
    for level in args.levels.split(","):
        every[level] = {}
        for n in sizes:
            repeats = args.repeats or (5 if n <= 10 else 3)
            runs = [one(n, level) for _ in range(repeats)]
            median = {k: statistics.median(r["seconds"][k] for r in runs) for k in runs[0]["seconds"]}
            cpu = {k: statistics.median(r["cpu"][k] for r in runs) for k in runs[0]["cpu"]}
            every[level][n] = {"seconds": median, "cpu": cpu, "runs": runs}
            last = runs[-1]
            print(f"{level:5s} {n:5d} nodes {8 * n:6d} GPUs: whole {median['whole']:7.3f} s, CPU {cpu['whole']:7.3f} s "
                  f"(median of {repeats}, load {os.getloadavg()[0]:.1f}); "
                  f"{last['rows']} rows, {last['nodes']} verdicts, drain {last['drain_hosts']} node(s)"
                  f"{' = the planted ones' if last['drain_as_planted'] else ' != THE PLANTED ONES'}, exit "
                  f"{last['exit']}, launches {', '.join(last['launches'])}; max RSS so far "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB", flush=True)
        print("\n".join(["", *table(level, sizes, every[level]), "", *table(level, sizes, every[level], "cpu"), ""]),
              flush=True)
    for sub, what in SUB.items():
        print(f"{sub.strip()}: {what}")
    print(f"uptime load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    save_json(args.json, every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
