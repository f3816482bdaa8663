"""False alarms: N healthy quick validates of 3 namespace hosts x 1 slot in a row, every row that is not PASS.

    .venv/bin/python benchmarks/healthy_validates.py --runs 20 --json healthy.json   # as root; ~30 min on 2 cores
    .venv/bin/python benchmarks/healthy_validates.py --records DIR [DIR ...]        # tally records already made

A nightly validate of a healthy cluster that WARNs one night in sixteen
raises an alarm every two to three weeks (issue 45): each line a figure is
judged by must sit past what healthy runs move by. Nothing is planted here;
the hosts share this machine's two cores, the noisiest place bench runs.
For each run: its exit status, verdict counts and every row whose status is
not PASS or SKIP, whole; at the end the counts of WARN and FAIL rows by
check, and, for the rows that are judged against peers, how far the worst
healthy figure sat from its line (the margin a line has here). The load
average goes beside each run. --records tallies the validate records under
the folders given (a results folder, or a validate folder) without running
anything: the suite's smoke run does that over its own healthy validate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO, machine, save_json  # noqa: E402

JUDGED = ("WARN", "FAIL", "ERROR")


def records_under(folders: list[str]) -> list[dict]:
    """Every validate record in results.jsonl files under these folders, oldest first."""
    out = []
    for top in folders:
        for root, _, files in os.walk(top):
            if "results.jsonl" in files:
                with open(os.path.join(root, "results.jsonl")) as f:
                    out += [r for r in map(json.loads, filter(str.strip, f)) if r.get("kind") == "validate"]
    return sorted(out, key=lambda r: r.get("run_id", ""))


_FROM = re.compile(r"([+-]\d+)% from the median")
_LINE = re.compile(r"(WARN|FAIL) below -(\d+)%")


def margin(row: dict) -> tuple[int, int, str] | None:
    """A row judged against its peers: (its % from their median, the first line below it, that line's status)."""
    text = f"{row.get('reason') or ''} {row.get('reference') or ''}"
    at, line = _FROM.search(text), _LINE.search(text)
    return (int(at.group(1)), -int(line.group(2)), line.group(1)) if at and line else None


def tally(recs: list[dict]) -> dict:
    """Per run: exit, counts, the rows not PASS/SKIP; in all: WARN/FAIL/ERROR rows by check, and per check judged
    against peers the figure that came closest to its line (headroom: how far above the line it stayed)."""
    runs, by_check, closest = [], Counter(), {}
    for rec in recs:
        for c in rec["checks"]:
            m = margin(c) if c["status"] != "SKIP" else None
            if m is not None and (c["check"] not in closest or m[0] - m[1] < closest[c["check"]]["headroom"]):
                closest[c["check"]] = {"node": c["node"], "from_median_pct": m[0], "line_pct": m[1],
                                       "line": m[2], "headroom": m[0] - m[1], "run_id": rec.get("run_id")}
        odd = [{k: c.get(k) for k in ("check", "node", "status", "value", "reference", "reason")}
               for c in rec["checks"] if c["status"] in JUDGED]
        by_check.update((c["check"], c["status"]) for c in odd)
        runs.append({"run_id": rec.get("run_id"), "exit": rec.get("exit_status"), "result": rec.get("result"),
                     "counts": rec.get("counts"), "rows": odd, "load": rec.get("load")})
    return {"runs": runs, "not_pass": {f"{c}:{s}": n for (c, s), n in sorted(by_check.items())},
            "runs_with_alarm": sum(bool(r["rows"]) for r in runs), "n": len(runs), "closest": closest}


def one(cluster, out: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "bench", "validate", "--hostfile", str(cluster.write_hostfile(1)),
                           "--level", "quick", "--out", out, "--json"], cwd=REPO, env=cluster.env,
                          capture_output=True, text=True, timeout=3600)
    try:
        rec = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"no record (exit {proc.returncode})\n{proc.stderr[-3000:]}") from None
    rec["load"] = os.getloadavg()[0]
    return rec


def show(t: dict) -> None:
    for r in t["runs"]:
        print(f"{r['run_id']}: exit {r['exit']} {r['result']} load {r['load']} counts {r['counts']}", flush=True)
        for c in r["rows"]:
            print(f"    {c['check']} {c['node']} {c['status']} | {c['value']} | {c['reference']} | {c['reason']}")
    for check, c in sorted(t.get("closest", {}).items()):
        print(f"closest to its line: {check} {c['node']} {c['from_median_pct']:+d}% from its peers' median, "
              f"{c['line']} below {c['line_pct']}%: {c['headroom']} points of headroom ({c['run_id']})")
    print(f"{t['n']} run(s), {t['runs_with_alarm']} with a row not PASS/SKIP; by check: {t['not_pass'] or 'none'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=20, help="validates in a row (default 20)")
    p.add_argument("--records", nargs="+", metavar="DIR", help="tally the validate records under these folders "
                   "instead of running any")
    p.add_argument("--json", metavar="FILE", help="write the tally as JSON too")
    p.add_argument("--out", metavar="DIR", help="keep the validates' records there (default: the hosts' own "
                   "folder, removed with them); --records DIR tallies them again later")
    args = p.parse_args()
    if args.records:
        t = tally(records_under(args.records))
    else:
        from tests.multihost import netns

        print(machine(), flush=True)
        recs = []
        with netns.build_cluster(3) as cluster:
            out = os.path.abspath(args.out) if args.out else os.path.join(cluster.tmp, "results")
            for k in range(args.runs):
                t0 = time.time()
                recs.append(one(cluster, out))
                print(f"run {k + 1}/{args.runs}: {time.time() - t0:.0f} s, exit {recs[-1]['exit_status']}, "
                      f"load {recs[-1]['load']:.1f}", flush=True)
        t = tally(recs)
    show(t)
    save_json(args.json, t)
    return 0 if t["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
