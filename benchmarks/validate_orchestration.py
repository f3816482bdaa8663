"""How long bench validate's orchestration takes as the cluster grows: 4, 8 and 16 namespace hosts.

    .venv/bin/python benchmarks/validate_orchestration.py --hosts 4,8,16      # as root; minutes

For each host count it builds that many network-namespace hosts (one sshd
each, tests/multihost/netns.py), one slot per host, and runs `bench
validate --level quick` three times with tiny jobs, one check each:
  inter-node   preflight, inventory, planning, one comm launch of every node
               (ring pairs in 2 rounds of N/2 pairs at once, then the whole set), collection
  numerics     the same, then one launch of the numerics job on every node
  throughput   the same, then one launch of DeepSpeed ranks that each train alone
  health       preflight, inventory and each node's own counters: no rank started (not by default; the
               smoke run's check: the orchestration alone, in seconds)
and prints each stage's wall time from the record (bench validate's
"stages"), with the machine's CPU-seconds over the run and the load
average. The hosts share this machine's two cores: every rank's start-up
(importing torch, timm, DeepSpeed) is serialised here, where on a real
cluster each node starts its own in parallel, so a launch stage's time here
grows with the node count by the ranks' CPU-seconds over two cores; the
pure orchestration (preflight, inventory, the launcher's fan-out and the
collection) is what must stay flat.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO, machine, parse_smoke, save_json  # noqa: E402
from tests.multihost import netns  # noqa: E402

CHECKS = ("inter-node", "numerics", "throughput")
KNOWN = (*CHECKS, "health")


def _cpu_seconds() -> float:
    """The machine's busy CPU time so far (user + nice + system + irq + softirq), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def one(cluster, check: str, out: str) -> dict:
    hostfile = cluster.write_hostfile(1)
    c0, t0 = _cpu_seconds(), time.time()
    proc = subprocess.run([sys.executable, "-m", "bench", "validate", "--hostfile", str(hostfile), "--level", "quick",
                           "--checks", check, "--out", out, "--json"], cwd=REPO, env=cluster.env,
                          capture_output=True, text=True, timeout=3600)
    wall, cpu = time.time() - t0, _cpu_seconds() - c0
    if not proc.stdout.strip():
        raise SystemExit(f"validate --checks {check} on {len(cluster.hosts)} hosts: no record\n{proc.stderr[-3000:]}")
    rec = json.loads(proc.stdout)
    stages = {s["stage"]: s for s in rec["stages"]}
    return {"hosts": len(cluster.hosts), "check": check, "result": rec["result"], "wall_s": wall, "cpu_s": cpu,
            "load": os.getloadavg()[0], "preflight_s": stages["preflight"]["duration_s"],
            "inventory_s": stages["inventory"]["duration_s"], "stage_s": stages[check]["duration_s"],
            "launches": stages[check]["launches"], "not_pass": [c["node"] + " " + c["check"] for c in rec["checks"]
                                                                if c["status"] not in ("PASS", "SKIP")]}


def main(argv: list[str] | None = None, cluster: netns.Cluster | None = None) -> int:
    """cluster: hosts to use instead of building them (the suite's, for its smoke run); --hosts is then its size."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", default="4,8,16", help="host counts, comma-separated")
    p.add_argument("--checks", default=",".join(CHECKS), help=f"of {', '.join(KNOWN)}")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON too")
    args = parse_smoke(p, argv, dict(hosts="3", checks="health"),
                       what="no check that starts ranks (each took 30 s or more of two loaded cores here)")
    unknown = sorted(set(args.checks.split(",")) - set(KNOWN))
    if unknown:
        print(f"validate_orchestration.py: --checks: unknown {', '.join(unknown)} (known: {', '.join(KNOWN)})",
              file=sys.stderr)
        return 2
    sizes = [int(x) for x in args.hosts.split(",")]
    if cluster is not None and sizes != [len(cluster.hosts)]:
        print(f"validate_orchestration.py: --hosts {args.hosts}: the cluster given has {len(cluster.hosts)} hosts",
              file=sys.stderr)
        return 2
    print(machine(), flush=True)
    rows = []
    for n in sizes:
        with contextlib.nullcontext(cluster) if cluster is not None else netns.build_cluster(n) as hosts:
            for check in args.checks.split(","):
                row = one(hosts, check, str(hosts.tmp / "results"))
                rows.append(row)
                print(f"{n:3d} hosts  {check:11s} {row['result']:4s}  preflight {row['preflight_s']:5.1f} s  inventory "
                      f"{row['inventory_s']:5.1f} s  {check} {row['stage_s']:6.1f} s ({row['launches']} launch(es))  "
                      f"total {row['wall_s']:6.1f} s  machine CPU {row['cpu_s']:6.1f} s  load {row['load']:.1f}"
                      + (f"  not PASS: {row['not_pass']}" if row["not_pass"] else ""), flush=True)
    save_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
