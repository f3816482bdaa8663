"""Time to verdict of each validate level on 3 namespace hosts x 2 CPU slots: quick (pdsh and inside Slurm), prolog,
health. What the sysadmin waits for, per stage, and the ranks' start-up apart from the checks.

    .venv/bin/python benchmarks/validate_levels.py --rounds 3          # as root; ~15 min on 2 cores

Each round runs, one after another on a quiet machine (interleaved, so a drift of the load falls on every
level alike):
  quick-pdsh    bench validate --hostfile H --level quick (3 hosts x 2 slots, over ssh)
  quick-slurm   salloc -N 3 --ntasks-per-node=2 bench validate --level quick (srun steps, sshd stopped)
  prolog        bench validate --level prolog on one host, over ssh (2 local ranks)
  health        bench validate --level health on one host, over ssh (no rank)
and prints each run's wall time, every stage's duration and launches (the record's "stages"), the ranks'
start-up of each launch where the stage says it, the verdict and the load average (1 min) beside it.
The hosts share this machine's two cores: six ranks' imports and steps are serialised here, where a real
cluster's nodes each start their own; the figures are this machine's, for comparison between levels and
commits, not a cluster's.
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
from tests.multihost.slurm import build_slurm  # noqa: E402

LEVELS = ("quick-pdsh", "quick-slurm", "prolog", "health")


def _record(proc: subprocess.CompletedProcess, what: str) -> dict:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"{what}: no record (exit {proc.returncode})\n{proc.stderr[-3000:]}") from None


def run(level: str, cluster, slurm, out: str) -> dict:
    t0 = time.time()
    if level == "quick-pdsh":
        proc = subprocess.run([sys.executable, "-m", "bench", "validate", "--hostfile",
                               str(cluster.write_hostfile(2)), "--level", "quick", "--out", out, "--json"],
                              cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=3600)
    elif level == "quick-slurm":
        for h in cluster.hosts:
            cluster.stop_sshd(h)
        try:
            proc = slurm.run_in_allocation(["--ntasks-per-node=2", sys.executable, "-m", "bench", "validate",
                                            "--level", "quick", "--out", out, "--json"], nodes=3, cwd=REPO,
                                           timeout=3600)
        finally:
            for h in cluster.hosts:
                cluster.start_sshd(h)
    else:
        proc = subprocess.run(["ssh", cluster.hosts[0], f"cd {REPO} && {sys.executable} -m bench validate --level "
                               f"{level} --out {out} --json"], env=cluster.env, capture_output=True, text=True,
                              timeout=600)
    wall = time.time() - t0
    rec = _record(proc, level)
    return {"level": level, "exit": proc.returncode, "result": rec["result"], "wall_s": wall,
            "load": os.getloadavg()[0], "stages": [{k: s.get(k) for k in ("stage", "duration_s", "launches",
                                                                        "startup_s")} for s in rec["stages"]],
            "verdicts": {h: n["verdict"] for h, n in rec.get("nodes", {}).items()}}


def main(argv: list[str] | None = None, cluster: netns.Cluster | None = None, slurm=None) -> int:
    """cluster, slurm: hosts (and a Slurm over them) to use instead of building 3 hosts (the suite's, for its
    smoke run); a Slurm is built only for quick-slurm."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--levels", default=",".join(LEVELS))
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON too")
    args = parse_smoke(p, argv, dict(rounds=1, levels="health"),
                       what="only the level that starts no rank (prolog took 41 s of two loaded cores here, quick "
                            "a minute or more)")
    levels = args.levels.split(",")
    unknown = sorted(set(levels) - set(LEVELS))
    if unknown:
        print(f"validate_levels.py: --levels: unknown {', '.join(unknown)} (known: {', '.join(LEVELS)})",
              file=sys.stderr)
        return 2
    print(machine(), flush=True)
    rows = []
    with contextlib.ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(netns.build_cluster(3))
        if slurm is None and "quick-slurm" in levels:
            slurm = stack.enter_context(build_slurm(cluster))
        for r in range(args.rounds):
            for level in (levels if r % 2 == 0 else levels[::-1]):
                row = run(level, cluster, slurm, str(cluster.tmp / "results"))
                rows.append(row)
                stages = "  ".join(f"{s['stage']} {s['duration_s']:.1f}s"
                                   + (f"/{s['launches']}L" if s["launches"] else "")
                                   + (f" (start-up {s['startup_s']:.1f}s)" if s.get("startup_s") else "")
                                   for s in row["stages"])
                print(f"round {r + 1} {level:12s} exit {row['exit']} {row['result']:5s} {row['wall_s']:6.1f} s  "
                      f"load {row['load']:.1f}  [{stages}]  {row['verdicts']}", flush=True)
    save_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
