"""`--out` on a real network filesystem: every namespace host and the head its own sshfs client (sharedfs.py).

Two profiles of cache options, as a site's mounts differ: "nfs" (a default
Linux NFS mount: listings fresh, attributes 3 s, negative lookups 60 s) and
"strict" (listings, attributes and negative lookups all cached 30 s); the
healthy validate runs on "nfs" with listings cached an hour. Each
test asks what the same command asks on the local disk (test_run_multihost,
test_validate): the same record, the same verdicts. The share of a profile
is mounted once per session (conftest.shared_cluster).
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.core import results
from tests.conftest import FAST, one_json, reaped
from tests.faults import cpu_quota_on

from . import sharedfs
from .validate_runs import not_pass, row, said, skip_if_load_hid

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

PER_GPU = ("throughput", "numerics", "matmul")


def _lines(out: str, needle: str) -> list[str]:
    """Lines of any rank log under `out` (read on the server's disk, no cache) that hold `needle`, with the log."""
    found = []
    for path in sorted(glob.glob(os.path.join(out, "**", "rank*.log"), recursive=True)):
        with open(path, errors="replace") as f:
            found += [f"{os.path.relpath(path, out)}: {line.strip()}" for line in f if needle in line]
    return found


# Each profile once, each launcher once (the suite's budget): a launcher reaches the share the same way under
# either profile's caches (its ranks' records and bench's reads go through the mount, not through the launcher).
@pytest.mark.parametrize("profile,launcher", [("nfs", "pdsh"), ("strict", "openmpi")])
def test_run_on_three_hosts(shared_cluster, profile, launcher):
    share = shared_cluster(profile)
    c = share.cluster
    out = share.out("run")
    proc = share.bench("--hostfile", str(c.hostfile), "--launcher", launcher, "--dataset", "synthetic",
                       "--steps", "20", "--json", *FAST, "--out", out, env=c.env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "ok" and rec["plan"]["launcher"] == launcher
    assert rec["plan"]["resources"] == {h: [0] for h in c.hosts}
    assert rec["figures"]["world_size"] == 3 and rec["figures"]["sanity"]["world_size_as_planned"]
    assert rec["provenance"]["hosts"] == c.hostnames
    assert {(d["rank"], d["host"]) for d in rec["provenance"]["devices"]} == set(enumerate(c.hostnames))
    # What the ranks wrote through their own clients is on the server's disk (read here without any cache).
    run_dir = rec["run_dir"]
    assert run_dir.startswith(out + "/")
    for r in range(3):
        assert os.path.isfile(os.path.join(run_dir, "logs", f"rank{r}.log")), r
    assert results.read(os.path.join(run_dir, "results.jsonl")).records[-1]["status"] == "ok"
    wire = rec["figures"]["comm"]["wire"]
    assert [(h["ranks"], sorted(h["nic"])) for h in wire["per_host"]] == [(1, ["vb0"])] * 3, wire
    assert 0.99 <= wire["over_sent"] <= 1.10, wire


@pytest.mark.parametrize("profile", ["strict"])  # nfs's plain run is test_run_on_three_hosts[nfs-pdsh]
def test_run_inside_slurm_each_slurmd_its_own_client(shared_slurm, shared_cluster, profile):
    """bench --launcher slurm in an allocation (test_slurm's recipe), bench on the head's mount, every rank a step
    of a slurmd that mounted the share itself (its own mount namespace, its own client)."""
    share = shared_cluster(profile)
    out = share.out("slurm")
    argv = [*share.fs.head_argv(), "salloc", "-N", "3", sys.executable, "-m", "bench", "--launcher", "slurm",
            "--master-addr", shared_slurm.addrs[0], "--dataset", "synthetic", "--steps", "20", "--json", *FAST,
            "--out", out]
    proc = shared_slurm.run(argv, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "ok" and rec["plan"]["launcher"] == "slurm" and rec["run_dir"].startswith(out + "/")
    assert rec["figures"]["world_size"] == 3 and rec["figures"]["sanity"]["world_size_as_planned"]
    assert {(d["rank"], d["host"]) for d in rec["provenance"]["devices"]} == set(enumerate(shared_slurm.nodes))
    for r in range(3):
        assert os.path.isfile(os.path.join(rec["run_dir"], "logs", f"rank{r}.log")), r
    # The steps ran where the share is sshfs, not this machine's disk.
    where = shared_slurm.run([*share.fs.head_argv(), "salloc", "-N", "3", "srun", "-N", "3", "sh", "-c",
                              f"grep ' {share.path} .* - fuse.sshfs ' /proc/self/mountinfo | wc -l"], timeout=120)
    assert where.stdout.split() == ["1"] * 3, where.stdout + where.stderr


def _every_gpu_judged(rec: dict, c, slow_gpu: str) -> None:
    gpus = {f"{h}:{s}" for h in c.hosts for s in range(2)}
    for check in PER_GPU:
        rows = [r for r in rec["checks"] if r["check"] == check and r["gpu"] is not None]
        assert {r["node"] for r in rows} == gpus, check
        assert not [r for r in rows if r["status"] == "ERROR" or (r["status"] == "FAIL" and r["node"] != slow_gpu)], \
            said(rows)


def _head_caches_listings_and_misses(share) -> None:
    """What the hour-cached validate is about, seen through the head's mount: once another client's write (here the
    server's own disk) made a file, a listing made before it still lacks it and a name looked up before it is still
    missing, after the directory's attributes expired (within those seconds "nfs" lists stale too; after, fresh)."""
    attr_s = float(dict(o.split("=") for o in share.opts.split(",") if "=" in o)["attr_timeout"])
    d = Path(share.out("cache-check"))
    head = share.fs.head_argv()
    subprocess.run([*head, "mkdir", str(d)], check=True)
    assert subprocess.run([*head, "ls", str(d)], capture_output=True, text=True, check=True).stdout.split() == []
    assert subprocess.run([*head, "stat", str(d / "late")], capture_output=True).returncode != 0
    (d / "late").write_text("made elsewhere\n")
    time.sleep(attr_s + 1)
    listed = subprocess.run([*head, "ls", str(d)], capture_output=True, text=True, check=True).stdout.split()
    looked = subprocess.run([*head, "stat", str(d / "late")], capture_output=True, text=True)
    assert listed == [] and looked.returncode != 0, (listed, looked.stdout)


def test_validate_with_listings_cached_an_hour_starts_every_launch_and_drains_only_the_slow_slot(shared_cluster):
    """validate --level quick, 3 hosts x 2 slots, on NFS's caches ("nfs": attributes 3 s, a name looked up as missing
    stays missing 60 s) with listings cached an hour (sharedfs.HOUR_LISTINGS), local rank 1 of one host at 8% of a
    core from its first timed step (test_validate's fault), asking three things of one run.

    No client ever sees another's new files by listing: a barrier, a count of started ranks or a glob of records made
    by listing the shared directory never fills. Every launch's steps must still start together (no rank's barrier
    runs out: 'starting anyway' in no log), and every rank's record is collected: every GPU judged.

    The slowed slot FAILs and is drained alone (its second look included); every other GPU PASSes, and the
    data-parallel run takes the five good ones. And no ERROR anywhere: before bench's ranks talked to it over the
    network, every GPU's throughput row was an ERROR here ("could not be measured: no report", exit 3):
    bench.launch.left_behind listed run_dir/alone every 2 s from the launch's start, the head's client cached "alone:
    no such file" (negative_timeout=60, as NFS's lookupcache=all does until the parent's attributes expire), and when
    the launch ended 20-40 s later bench.jobs.alone read alone/rank<R>.json through that cached miss. (These were
    three validates: a healthy one on "nfs", one on listings an hour, and the slow slot on "strict"; bench lists
    nothing, so fresh listings give it nothing to use, and the strict profile's plain runs, sweeps and faults stay.)"""
    share = shared_cluster("hour", sharedfs.HOUR_LISTINGS)
    c = share.cluster
    slow = c.hosts[1]
    gpu = f"{slow}:1"
    out = share.out("validate")
    anyway: list[str] = []
    with cpu_quota_on(c, slow, local_rank=1, module="bench.worker", quota_us=8000, after="start barrier") as moved:
        proc = share.popen("validate", "--hostfile", str(c.write_hostfile(2)), "--level", "quick", "--json",
                           "--out", out, env=c.env)
        # The first barrier that runs out (after 120 s) fails the test at once: bench is stopped as Ctrl-C stops it
        # (every rank by PID), not left to wait out the next barrier too (~5 min on today's code).
        with reaped(proc):
            _head_caches_listings_and_misses(share)  # while bench starts: its own folder, a few seconds of waiting
            deadline = time.monotonic() + 900
            while proc.poll() is None and not anyway and time.monotonic() < deadline:
                time.sleep(1)
                anyway = _lines(out, "starting anyway")
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=120)
    anyway += [line for line in _lines(out, "starting anyway") if line not in anyway]
    assert not anyway, anyway
    assert moved, "the quota caught no rank"
    rec = one_json(stdout) if stdout.strip() else None
    assert rec is not None, stderr[-3000:] + stdout[-3000:]
    results.validate(rec)
    _every_gpu_judged(rec, c, gpu)
    assert rec["unknown"] == [] and rec["exit_status"] == proc.returncode
    skip_if_load_hid(rec, gpu)
    assert proc.returncode == 1, stderr[-3000:] + said(not_pass(rec, "burn", "rails"))
    assert row(rec, "throughput", gpu)["status"] == "FAIL"
    assert [(e["host"], e["gpu"], e["check"]) for e in rec["drain"]] == [(slow, 1, "throughput")], rec["drain"]
    others = [r for r in rec["checks"] if r["check"] == "throughput" and r["gpu"] is not None and r["node"] != gpu]
    assert len(others) == 5 and {r["status"] for r in others} == {"PASS"}, said(others)
    assert rec["measured"]["dp"]["world_size"] == 5
    assert {h: n["verdict"] for h, n in rec["nodes"].items() if h != slow} == dict.fromkeys(
        [h for h in c.hosts if h != slow], "healthy"), said(not_pass(rec, "burn", "rails"))
