"""The drift test's false-alarm rate on real healthy fleets, and what it catches there (issue 56).

    .venv/bin/python benchmarks/history_drift.py                   # every fleet of ../shared/fixtures/fleets
    .venv/bin/python benchmarks/history_drift.py --smoke           # 40 GPUs of one fleet, seconds

The fleets are real repeated runs of the same GPUs (../shared/fixtures/fleets/gpu-variability, SOURCES.md:
TACC Longhorn's V100s, the SC22 "Not All GPUs Are Created Equal" measurements: sgemm, bert, resnet, pagerank;
each row one job on one GPU, perf a time). Each GPU with at least MIN_RUNS runs is one subject; its figure per
run is 1 / perf over the median of every GPU measured that day (the whole fleet's median where fewer than
DAY_MIN ran that day): bench history's rel, the night's common shift out. bench.history.drift's test runs as
bench validate runs it, once per run from the MIN_RUNS-th on, over the last WINDOW runs (a night's test).

False alarms: every alarm on these fleets (nothing was planted; a GPU that really slowed would count too, so
the rate is an upper bound), per 1,000 tests and per 1,000 GPUs (a GPU alarmed on any night counts once).
Caught: the same series with a loss of --plant (0.3%) a run planted over each GPU's last WINDOW runs, the
share of GPUs named on that last night. Pure computation on recorded figures: no rank, no host.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import random
import statistics
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO, machine, parse_smoke, save_json  # noqa: E402
from bench.history import drift  # noqa: E402

FLEETS = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "fleets", "gpu-variability")
FILES = ("sgemm-longhorn-agg.csv", "bert-longhorn-agg.csv", "resnet-longhorn-agg.csv", "pagerank-longhorn-agg.csv")
DAY_MIN = 5


def series(path: str, limit: int | None = None) -> dict[str, list[float]]:
    """{GPU uuid: its rel figure per run, oldest first} of one fleet file."""
    runs = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                perf, ts = float(row["perf"]), float(row["ts"])
            except (KeyError, TypeError, ValueError):
                continue
            if perf > 0 and math.isfinite(perf):
                runs.append((row["uuid"], ts, 1.0 / perf))
    # A run is one (GPU, time): sgemm's file holds 2,284 of its 11,087 rows twice or three times, byte for byte.
    once: dict[tuple[str, float], list[float]] = defaultdict(list)
    for uuid, ts, x in runs:
        once[(uuid, ts)].append(x)
    runs = [(uuid, ts, statistics.median(xs)) for (uuid, ts), xs in once.items()]
    whole = statistics.median(x for _, _, x in runs)
    by_day = defaultdict(list)
    for _, ts, x in runs:
        by_day[int(ts // 86400)].append(x)
    mid = {d: statistics.median(xs) if len(xs) >= DAY_MIN else whole for d, xs in by_day.items()}
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for uuid, ts, x in runs:
        out[uuid].append((ts, x / mid[int(ts // 86400)]))
    kept = {u: [x for _, x in sorted(v)] for u, v in sorted(out.items()) if len(v) >= drift.MIN_RUNS}
    return dict(list(kept.items())[:limit]) if limit else kept


def nightly(xs: list[float], window: int) -> list[dict]:
    """The test as bench validate runs it each night from the MIN_RUNS-th run on."""
    return [r for k in range(drift.MIN_RUNS, len(xs) + 1) if (r := drift.test(xs[:k], window))]


def shuffled(gpus: dict[str, list[float]], window: int, rounds: int, seed: int = 56) -> tuple[int, int, int]:
    """(histories, histories alarmed on any night, tests): each GPU's own runs in a seeded random order, `rounds`
    times: any trend taken out, the GPU's real noise and outliers kept, so every alarm is a false one."""
    rng = random.Random(seed)
    histories = hit = tests = 0
    for _ in range(rounds):
        for xs in gpus.values():
            ys = xs[:]
            rng.shuffle(ys)
            got = nightly(ys, window)
            histories, tests, hit = histories + 1, tests + len(got), hit + any(r["alarm"] for r in got)
    return histories, hit, tests


def fleet(name: str, gpus: dict[str, list[float]], window: int, plant: float, rounds: int) -> dict:
    tests = alarms = 0
    alarmed, caught, spreads = [], 0, []
    null = shuffled(gpus, window, rounds)
    for uuid, xs in gpus.items():
        got = nightly(xs, window)
        tests += len(got)
        hits = sum(r["alarm"] for r in got)
        alarms += hits
        if hits:
            alarmed.append({"gpu": uuid, "alarms": hits, "worst_drop": max(r["drop"] for r in got if r["alarm"]),
                            "runs": len(xs), "first5": statistics.median(xs[:5]), "last5": statistics.median(xs[-5:])})
        spreads.append(statistics.pstdev(xs) / statistics.mean(xs))
        last = xs[-window:]
        planted = xs[:-window] + [x * (1 - plant) ** i for i, x in enumerate(last)]
        r = drift.test(planted, window)
        caught += bool(r and r["alarm"])
    n = len(gpus)
    return {"fleet": name, "gpus": n, "tests": tests, "alarms": alarms, "per_1000_tests": 1000 * alarms / max(tests, 1),
            "gpus_alarmed": len(alarmed), "per_1000_gpus": 1000 * len(alarmed) / max(n, 1),
            "run_to_run": statistics.median(spreads) if spreads else None, "caught": caught, "alarmed": alarmed,
            "shuffled": {"histories": null[0], "alarmed": null[1], "tests": null[2]}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fleets", default=",".join(FILES), help="fleet files of gpu-variability/, comma-separated")
    p.add_argument("--gpus", type=int, default=None, help="at most this many GPUs per fleet (default all)")
    p.add_argument("--window", type=int, default=drift.WINDOW)
    p.add_argument("--plant", type=float, default=0.003, help="the loss a run planted to count what is caught")
    p.add_argument("--rounds", type=int, default=25, help="shuffled copies of every GPU's runs (the null)")
    p.add_argument("--json", metavar="FILE")
    args = parse_smoke(p, argv, {"fleets": FILES[0], "gpus": 40, "rounds": 1})
    print(machine(), flush=True)
    print(f"drift test: {drift.STATISTIC}; each run's figure over that day's fleet median")
    print(f"{'fleet':<28} {'GPUs':>5} {'tests':>6} {'alarms':>6} {'/1000 tests':>11} {'GPUs alarmed':>12} "
          f"{'/1000 GPUs':>10} {'run-to-run':>10} {'caught':>9} {'shuffled alarmed':>18}")
    rows, t0 = [], time.perf_counter()
    for name in args.fleets.split(","):
        r = fleet(name, series(os.path.join(FLEETS, name), args.gpus), args.window, args.plant, args.rounds)
        sh = r["shuffled"]
        rows.append(r)
        print(f"{name:<28} {r['gpus']:>5} {r['tests']:>6} {r['alarms']:>6} {r['per_1000_tests']:>11.2f} "
              f"{r['gpus_alarmed']:>12} {r['per_1000_gpus']:>10.2f} {r['run_to_run']:>10.2%} "
              f"{r['caught']:>4}/{r['gpus']:<4} {sh['alarmed']:>8}/{sh['histories']:<9}", flush=True)
        for a in r["alarmed"]:
            print(f"  alarmed: {a['gpu']} on {a['alarms']} night(s), worst loss {a['worst_drop']:.1%}; over its {a['runs']} "
                  f"runs its median of the first 5 {a['first5']:.3f} of the day's fleet median, of the last 5 "
                  f"{a['last5']:.3f}")
    gpus, tests = sum(r["gpus"] for r in rows), sum(r["tests"] for r in rows)
    alarmed, alarms = sum(r["gpus_alarmed"] for r in rows), sum(r["alarms"] for r in rows)
    sh_n, sh_hit = sum(r["shuffled"]["histories"] for r in rows), sum(r["shuffled"]["alarmed"] for r in rows)
    sh_tests = sum(r["shuffled"]["tests"] for r in rows)
    print(f"shuffled (every alarm false): {sh_hit} of {sh_n} GPU histories alarmed = {1000 * sh_hit / max(sh_n, 1):.2f} "
          f"per 1,000 GPUs over {sh_tests} nightly tests (none: at most {3000 / max(sh_n, 1):.2f} per 1,000 GPUs at "
          "95%, the rule of three)")
    print(f"all: {gpus} GPUs, {tests} nightly tests: {alarms} alarm(s) on {alarmed} GPU(s) = "
          f"{1000 * alarmed / max(gpus, 1):.2f} per 1,000 GPUs, {1000 * alarms / max(tests, 1):.2f} per 1,000 tests"
          f"{' (none: at most %.2f per 1,000 tests at 95%%) ' % (3000 / max(tests, 1)) if not alarms else ''}; planted "
          f"{args.plant:.1%} a run caught on {sum(r['caught'] for r in rows)}/{gpus}; "
          f"{time.perf_counter() - t0:.1f} s, load {os.getloadavg()[0]:.1f}")
    save_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
