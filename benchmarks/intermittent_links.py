"""How many looks at each pair the full level needs: a NIC slow in half of its looks caught, no healthy node called slow.

    .venv/bin/python benchmarks/intermittent_links.py --nodes 1000 --seeds 20 --looks 1,2,3,4 --noise 0.01,0.05
    .venv/bin/python benchmarks/intermittent_links.py --nodes 64 --seeds 1 --looks 1,3 --noise 0.01   # the smoke run

bench validate judges a node by the share of its looks that fell short
(bench.validate.blame: a third WARN, two thirds FAIL). A share from few looks
means little: at full, 1,000 nodes meet 6 partners (the ring and 4 random
matchings), and with one look at each a NIC that drops to half speed in half
of its looks shows in 2 or more of 6 only 89% of the time. This simulation runs
bench's own inter-node check (tests/scale_fixtures.inter_only: leaves of 32,
every look drawn from the fabric model, each pair's second look and the
bisection included) with one node flaky (half speed in half its looks) and,
with the same seed, none; per number of looks (Level.pair_looks) and noise
(one look's lognormal standard deviation) it prints how many seeds caught the
flaky node (not PASS), how many healthy nodes WARNed or FAILed in all, and
the seconds one check took. Pure computation: no rank, no host.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine, save_json  # noqa: E402
from tests import scale_fixtures as sf  # noqa: E402

FLAKY_SHARE = 0.5


def cell(nodes: int, seeds: int, looks: int, noise: float) -> dict:
    flaky = sf.host(nodes // 2)
    caught, warn, fail, took = 0, 0, 0, []
    for seed in range(seeds):
        t0 = time.perf_counter()
        rows = sf.inter_only(sf.Fabric(flaky={flaky: FLAKY_SHARE}, noise=noise), nodes, seed, pair_looks=looks)
        took.append(time.perf_counter() - t0)
        caught += rows[flaky].status != "PASS"
        healthy = sf.inter_only(sf.Fabric(noise=noise), nodes, seed, pair_looks=looks)
        others = [c for h, c in rows.items() if h != flaky] + list(healthy.values())
        warn += sum(c.status == "WARN" for c in others)
        fail += sum(c.status == "FAIL" for c in others)
    return {"nodes": nodes, "looks": looks, "noise": noise, "seeds": seeds, "caught": caught,
            "false_warn": warn, "false_fail": fail, "seconds": sorted(took)[len(took) // 2]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--looks", default="1,2,3,4", help="Level.pair_looks values to try (comma-separated)")
    p.add_argument("--noise", default="0.01", help="one look's lognormal standard deviation(s), comma-separated")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    print(machine(), flush=True)
    print(f"{'looks':>5} {'noise':>6} {'caught':>8} {'false WARN':>10} {'false FAIL':>10} {'s/check':>8}")
    rows = []
    for noise in map(float, args.noise.split(",")):
        for looks in map(int, args.looks.split(",")):
            r = cell(args.nodes, args.seeds, looks, noise)
            rows.append(r)
            print(f"{looks:>5} {noise:>6.3f} {r['caught']:>4}/{r['seeds']:<3} {r['false_warn']:>10} "
                  f"{r['false_fail']:>10} {r['seconds']:>8.2f}", flush=True)
    print(f"{args.nodes} nodes x {sf.GPUS}, leaves of 32, one node at half speed in {FLAKY_SHARE:.0%} of its looks; "
          f"false: the other nodes of that run and every node of a healthy run with the same seed; load "
          f"{os.getloadavg()[0]:.1f}")
    save_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
