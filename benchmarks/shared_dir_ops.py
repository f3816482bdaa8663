"""The filesystem operations one `bench run` makes on the shared --out directory, as its file server sees them, at
2, 4, 6 and 12 ranks: per launch, and per second while the ranks train (issue 39 item 5).

    PYTHONPATH=. .venv/bin/python benchmarks/shared_dir_ops.py --json ops.json       # as root; ~6 min on 2 cores

The namespace hosts and the head each mount --out with their own sshfs client of one SFTP server
(tests/multihost/sharedfs.py, profile "nfs" unless --profile: listings fresh, attributes 3 s, negative lookups
60 s, as a default NFS mount), which logs every request it serves (sftp-server -l DEBUG3). Each point is one
`bench run` over pdsh, synthetic data, the tests' smallest model, at two step counts: --steps (default 10), and
as many more as take about --train-s seconds (default 20) at the step time the first run measured:

  per launch    the requests from bench's start to its exit at the smaller step count (everything one launch costs
                the server: preflight, start-up, barriers, training, records, cleanup);
  per second    while ranks train: (requests at the larger count - at the smaller) / (duration difference), the
                cost of the training seconds alone, whatever bench does at start and end.

Request types as the server names them: open (creates: open with O_CREAT, counted apart), close, lstat/stat/fstat,
opendir, readdir, read, write, mkdir, rmdir, remove, posix-rename, setstat, realpath and the rest. A FUSE client
answers many calls from its own caches, so these are what reached the server: the load a metadata server feels.
The ranks time-slice two cores here; the counts, not the durations, are the figures to compare.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO, load, machine, parse_smoke  # noqa: E402
from tests.conftest import FAST  # noqa: E402
from tests.multihost import netns, sharedfs  # noqa: E402

# ranks: (hosts, slots per host)
POINTS = {2: (2, 1), 4: (2, 2), 6: (3, 2), 12: (3, 4)}
REQUEST = re.compile(r"^(\d+\.\d+) debug\d: request \d+: (\S+)(?: flags (\d+))?")
# The server's line that names the file of each request (its VERBOSE line, or the debug1 line for read, write,
# readdir and fstat): 'open "P" flags', 'lstat name "P"', 'posix-rename old "P" new', 'request 9: read "P" (handle'.
NAMED = re.compile(r'^\d+\.\d+ (?:debug1: request \d+: )?([a-z@.-]+)(?: name| old)? "([^"]*)"')
CREAT = 0x08  # SSH2_FXF_CREAT
COLUMNS = ("create", "open", "close", "stat", "opendir", "readdir", "read", "write", "mkdir", "rename", "remove",
           "other")


def _group(op: str, flags: str | None) -> str:
    if op == "open":
        return "create" if flags and int(flags) & CREAT else "open"
    if op in ("lstat", "stat", "fstat"):
        return "stat"
    if op in ("posix-rename", "rename"):
        return "rename"
    if op in ("remove", "rmdir"):
        return "remove"
    return op if op in COLUMNS else "other"


def _shape(path: str, root: str) -> str:
    """A path as a pattern: relative to the share's --out, every number N (run ids, ranks, PIDs)."""
    rel = path[len(root):].lstrip("/").split("/", 1)[-1] if path.startswith(root) else path
    return re.sub(r"\d+", "N", rel) or "."


def count(log: str, start: int, end: int, root: str = "") -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Requests in log bytes [start, end): by group, by the server's own name, and by (request, path pattern)."""
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read(end - start).decode(errors="replace")
    groups: collections.Counter = collections.Counter()
    raw: collections.Counter = collections.Counter()
    paths: collections.Counter = collections.Counter()
    for line in text.splitlines():
        if n := NAMED.match(line):
            paths[f"{n[1]} {_shape(n[2], root)}"] += 1
        m = REQUEST.match(line)
        if m and m[2] != "sent":
            groups[_group(m[2], m[3])] += 1
            raw[m[2]] += 1
    return {c: groups.get(c, 0) for c in COLUMNS}, dict(sorted(raw.items())), dict(paths.most_common())


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, text=True, capture_output=True).stdout.strip()


def _hostfile(c: netns.Cluster, hosts: int, slots: int) -> str:
    path = c.tmp / f"hostfile-ops-{hosts}x{slots}"
    path.write_text("".join(f"{h} slots={slots}\n" for h in c.hosts[:hosts]))
    return str(path)


def launch(fs: sharedfs.SharedFS, share: sharedfs.Share, hosts: int, slots: int, steps: int) -> dict:
    c = fs.cluster
    start = os.path.getsize(fs.log)
    t0 = time.monotonic()
    proc = share.bench("--hostfile", _hostfile(c, hosts, slots), "--launcher", "pdsh", "--dataset", "synthetic",
                       "--steps", str(steps), "--json", *FAST, "--out", share.out(f"{hosts}x{slots}-{steps}"),
                       env=c.env, timeout=900)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench run {hosts}x{slots} --steps {steps}: rc {proc.returncode}\n{proc.stderr[-3000:]}")
    time.sleep(1.0)  # the clients' last releases and the log's copy thread
    groups, raw, paths = count(str(fs.log), start, os.path.getsize(fs.log), share.path)
    rec = json.loads(proc.stdout)
    return {"steps": steps, "wall_s": round(wall, 2), "duration_s": rec.get("duration_s"),
            "step_s": rec["figures"]["step_s"]["mean"], "total": sum(groups.values()),
            "by_type": groups, "requests": raw, "by_path": paths, "load": round(load(), 2)}


def main(argv: list[str] | None = None, cluster: netns.Cluster | None = None) -> int:
    """cluster: 3 hosts to use instead of building them (the suite's, for its smoke run); the file server, its
    request log and the mounts are this run's own either way."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,4,6,12", help="points, of " + ", ".join(map(str, POINTS)))
    p.add_argument("--steps", type=int, default=10, help="steps of the launch counted per launch")
    p.add_argument("--train-s", type=float, default=20.0, help="seconds of training the longer launch adds")
    p.add_argument("--profile", default="nfs", choices=sorted(sharedfs.PROFILES))
    p.add_argument("--json", help="write the figures here")
    # 6 steps: the fewest that leave one timed past bench run's 5 warm-up steps; 8 s more training in the longer
    # launch: 2 s was not enough when the suite's first launch met cold caches (it took 1.1 s longer than 16 steps).
    args = parse_smoke(p, argv, dict(ranks="2", steps=6, train_s=8.0),
                       what="one point, 2 ranks on 2 hosts, its launch and the longer one; not 4 to 12 ranks")
    short = args.steps
    env_line = machine()
    print(env_line)
    if cluster is None:  # a crashed run's hosts and mounts; not while a suite's own are in use
        netns.clean_stale()
        sharedfs.clean_stale()
    points = []
    with contextlib.nullcontext(cluster) if cluster is not None else netns.build_cluster(3) as c, \
            sharedfs.shared_fs(c, log_level="DEBUG3") as fs:
        share = fs.share(args.profile)
        for ranks in (int(r) for r in args.ranks.split(",")):
            hosts, slots = POINTS[ranks]
            a = launch(fs, share, hosts, slots, short)
            long = short + min(400, max(10, round(args.train_s / a["step_s"])))
            b = launch(fs, share, hosts, slots, long)
            dt = (b["duration_s"] or b["wall_s"]) - (a["duration_s"] or a["wall_s"])
            if dt <= 0:
                raise SystemExit(f"{ranks} ranks: the longer launch took no longer ({dt:+.2f} s): raise --train-s")
            per_s = {k: round((b["by_type"][k] - a["by_type"][k]) / dt, 1) for k in COLUMNS}
            by_path = {k: round((b["by_path"].get(k, 0) - a["by_path"].get(k, 0)) / dt, 2) for k in b["by_path"]}
            by_path = dict(sorted(((k, v) for k, v in by_path.items() if v > 0), key=lambda kv: -kv[1])[:20])
            point = {"ranks": ranks, "hosts": hosts, "slots": slots, "launch": a, "longer": b,
                     "train_s": round(dt, 2), "per_s": per_s, "per_s_by_path": by_path, "total_per_s": round(sum(per_s.values()), 1)}
            points.append(point)
            print(f"{ranks:>2} ranks ({hosts}x{slots}): {a['total']} requests in {a['duration_s']:.1f} s at "
                  f"{short} steps, {b['total']} in {b['duration_s']:.1f} s at {long}: {point['total_per_s']}/s training "
                  f"(load {a['load']}, {b['load']})", flush=True)
    head = "| ranks | per launch | " + " | ".join(COLUMNS) + " | per s training | " + " | ".join(COLUMNS) + " |"
    print("\n" + head + "\n|" + "---|" * (3 + 2 * len(COLUMNS)))
    for pt in points:
        a = pt["launch"]["by_type"]
        print(f"| {pt['ranks']} | {pt['launch']['total']} | " + " | ".join(str(a[k]) for k in COLUMNS)
              + f" | {pt['total_per_s']} | " + " | ".join(str(pt["per_s"][k]) for k in COLUMNS) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": env_line, "command": " ".join(sys.argv), "profile": args.profile,
                       "mount_options": sharedfs.PROFILES[args.profile], "train_s": args.train_s,
                       "commit": _git("rev-parse", "--short", "HEAD"),
                       "bench_commit": _git("log", "-1", "--format=%h", "--", "bench"),  # the code measured
                       "points": points}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
