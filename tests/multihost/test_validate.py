"""`bench validate` on real hosts (netns + sshd, see netns.py): healthy, a throttled link, a dead sshd.

Each scenario runs validate once (quick level: the micro ViT, synthetic
data, messages of its gradient's size) with the cluster's env: the ssh
wrapper first on PATH and GLOO_SOCKET_IFNAME=vb0. The hosts share this
machine's two cores, which makes every per-node figure jitter: a healthy
cluster must still PASS with no WARN, and a broken host (a throttled link,
half a CPU, no sshd) must be named with the right kind. Predicted and
measured data-parallel efficiency must agree (see _prediction_holds).
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

import contextlib
import os

from bench.core import results
from tests.conftest import bench, one_json

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

PER_NODE = ("preflight", "inventory", "throughput", "bandwidth")
CLUSTER_CHECKS = ("heterogeneity", "bandwidth", "training", "stragglers", "scaling")


def _validate(cluster, tmp_path, *extra: str):
    junit = tmp_path / "validate.xml"
    proc = bench("validate", "--hostfile", str(cluster.hostfile), "--level", "quick", "--junit", str(junit),
                 "--out", str(tmp_path / "results"), "--json", *extra, env=cluster.env, timeout=600)
    rec = one_json(proc.stdout) if proc.stdout.strip() else None
    return proc, rec, junit


def _status(rec: dict, check: str, node: str) -> dict:
    (row,) = [c for c in rec["checks"] if c["check"] == check and c["node"] == node]
    return row


def _every_node_listed(rec: dict, hosts: list[str]) -> None:
    pairs = [(c["check"], c["node"]) for c in rec["checks"]]
    assert len(pairs) == len(set(pairs)), "a check listed twice for one node"
    for check in PER_NODE:
        for host in hosts:
            assert (check, host) in pairs, (check, host)
    for check in CLUSTER_CHECKS:
        assert (check, "cluster") in pairs, check


def _junit_matches(junit, rec: dict) -> None:
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == len(rec["checks"])
    assert {c.get("name") for c in cases} == {f"{c['check']} [{c['node']}]" for c in rec["checks"]}
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {f"{c['check']} [{c['node']}]" for c in rec["checks"] if c["status"] == "FAIL"}


def _prediction_holds(rec: dict) -> None:
    # The measured efficiency itself moves by up to +-8 points from run to run here (three hosts time-slice
    # two cores); a prediction cannot agree more closely than the measurement repeats. The model gives a
    # range: with the slowest-of-n wait for independent jitter, and without it (jitter the nodes share, as
    # these do: they slow down together). Seen here: measured 75-94% where the two ends were 70-77% and
    # about 96% (METRICS.md, predicted data-parallel efficiency).
    s = rec["measured"]["scaling"]
    lo, hi = sorted((s["predicted"], s["predicted_without_jitter"]))
    assert lo - 0.15 <= s["measured"] <= hi + 0.15, s


@pytest.fixture(scope="module")
def healthy(cluster, tmp_path_factory):
    """One validate of the healthy cluster: its test, and the baseline the slowed-host test compares with."""
    tmp = tmp_path_factory.mktemp("healthy")
    return (*_validate(cluster, tmp, "--metrics-file", str(tmp / "validate.prom")), tmp / "results")


def test_healthy_cluster_passes_with_every_check_listed(healthy, cluster):
    proc, rec, junit, _ = healthy
    # Every check that ran is a 0/1 gauge, every node's figures are there with its GPU model.
    from tests.metrics_check import parse, values
    got = parse((junit.parent / "validate.prom").read_text())
    ran = [c for c in rec["checks"] if c["status"] != "SKIP"]
    assert len(values(got, "vitbench_validate_check")) == len(ran)
    assert values(got, "vitbench_validate_check", status="PASS") == [1.0] * len(ran)
    for host in cluster.hosts:
        assert values(got, "vitbench_node_images_per_second", host=host, gpu_model="cpu") == \
            [rec["measured"]["node_images_per_s"][host]]
        assert values(got, "vitbench_node_busbw_bytes_per_second", host=host) == [rec["measured"]["node_busbw"][host]]
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    results.validate(rec)
    assert rec["kind"] == "validate" and rec["failed_hosts"] == []
    _every_node_listed(rec, cluster.hosts)
    # Nothing is wrong with these hosts: no WARN either (a straggler that does not exist is a false alarm).
    assert rec["result"] == "PASS", [c for c in rec["checks"] if c["status"] != "PASS"]
    assert all(c["status"] == "PASS" for c in rec["checks"]), rec["checks"]
    _prediction_holds(rec)
    assert _status(rec, "training", "cluster")["status"] == "PASS"
    assert rec["measured"]["dp"]["world_size"] == 3
    assert rec["measured"]["scaling"]["predicted"] > 0 and rec["measured"]["scaling"]["measured"] > 0
    # Every check's figure came from a run recorded in the validate folder.
    for run_dir in rec["runs"].values():
        assert results.read(f"{run_dir}/results.jsonl").records[-1]["status"] == "ok"
    _junit_matches(junit, rec)


def test_throttled_link_is_named_and_left_out(cluster, tmp_path):
    slow = cluster.hosts[1]
    # 100 Mbit/s against the veth bridge's ~18 Gbit/s: slow enough that no contention can hide it.
    tbf = ["tc", "qdisc", "add", "dev", "vb0", "root", "tbf", "rate", "100mbit", "burst", "64kbit", "latency", "50ms"]
    r = cluster.exec_in(slow, tbf)
    assert r.returncode == 0, r.stderr
    try:
        proc, rec, junit = _validate(cluster, tmp_path)
    finally:
        cluster.exec_in(slow, ["tc", "qdisc", "del", "dev", "vb0", "root"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    results.validate(rec)
    assert rec["result"] == "FAIL" and rec["failed_hosts"] == [slow]
    _every_node_listed(rec, cluster.hosts)
    assert _status(rec, "bandwidth", slow)["status"] == "FAIL"
    for host in (cluster.hosts[0], cluster.hosts[2]):
        assert _status(rec, "bandwidth", host)["status"] != "FAIL"
    # The rest still ran: training on the two good nodes, without the slow one.
    assert _status(rec, "training", "cluster")["status"] == "PASS"
    assert sorted(rec["measured"]["dp"]["hosts"]) == sorted([cluster.hosts[0], cluster.hosts[2]])
    top = rec["measured"]["stragglers"][0]
    assert (top["kind"], top["host"], top["exclude"]) == ("link", slow, slow)
    assert f"--exclude {slow}" in _status(rec, "stragglers", "cluster")["reason"]
    # Judged after measuring it again: the reason says how often it was slow.
    assert "below the WARN line in 3 of 3 measurement(s)" in _status(rec, "bandwidth", slow)["reason"]
    # No prediction check here: the data-parallel run is over the two good hosts, while every host's single
    # run was measured with all three time-slicing the two cores; on this test cluster the two runs see
    # different contention (on real nodes they would not), so measured and predicted are not comparable.
    # Seen: predicted 93%, measured 72% at 2 ranks. Both must still be figures.
    s = rec["measured"]["scaling"]
    assert 0 < s["measured"] < 1.2 and 0 < s["predicted"] <= 1, s
    _junit_matches(junit, rec)


@contextlib.contextmanager
def _half_a_cpu(cluster, host, quota_us: int = 50000):
    """The host's sshd (so every rank started over ssh) in a cgroup v1 CPU quota (half a core); yields the cgroup."""
    cg = f"/sys/fs/cgroup/cpu/vitbench-test-{os.getpid()}"
    if not os.path.isdir("/sys/fs/cgroup/cpu"):
        pytest.skip("no cgroup v1 cpu controller here")
    os.makedirs(cg, exist_ok=True)
    with open(f"{cg}/cpu.cfs_period_us", "w") as f:
        f.write("100000")
    with open(f"{cg}/cpu.cfs_quota_us", "w") as f:
        f.write(str(quota_us))
    pid = cluster.sshd_pids[host]
    with open(f"{cg}/cgroup.procs", "w") as f:
        f.write(str(pid))
    try:
        yield cg
    finally:
        with open(f"{cg}/cgroup.procs") as f:
            left = f.read().split()
        for p in left:
            with contextlib.suppress(OSError), open("/sys/fs/cgroup/cpu/cgroup.procs", "w") as f:
                f.write(p)
        with contextlib.suppress(OSError):
            os.rmdir(cg)


def test_host_with_half_a_cpu_is_named_as_the_straggler(cluster, tmp_path, healthy):
    slow = cluster.hosts[1]
    with _half_a_cpu(cluster, slow):
        proc, rec, junit = _validate(cluster, tmp_path, "--baseline", str(healthy[3]))
    assert proc.stdout.strip(), proc.stderr[-3000:]
    results.validate(rec)
    top = rec["measured"]["stragglers"][0]
    assert top["host"] == slow and top["kind"] in ("gpu", "node"), rec["measured"]["stragglers"]
    row = _status(rec, "stragglers", "cluster")
    assert row["status"] == "WARN" and f"--exclude {slow}" in row["reason"]
    _prediction_holds(rec)
    # Against the healthy run as baseline: the slowed host's throughput regressed. (Other hosts are not
    # asserted: with one run a side the 5% threshold alone judges, and on these time-sliced cores a healthy
    # host's single run moves by more than that; `--repeats` gives the spread that absorbs it.)
    base = _status(rec, "baseline", slow)
    assert base["status"] == "FAIL" and base["reason"].startswith("regressed: "), base
    assert "images_per_s" in base["reason"].split(";")[0], base
    assert proc.returncode == 1


def test_host_without_sshd_is_named_at_once(cluster, tmp_path):
    gone = cluster.hosts[2]
    cluster.stop_sshd(gone)
    try:
        t0 = time.monotonic()
        proc, rec, junit = _validate(cluster, tmp_path)  # the defaults, as a sysadmin types it
        elapsed = time.monotonic() - t0
    finally:
        cluster.start_sshd(gone)
    assert proc.returncode == 1, proc.stderr[-3000:]
    results.validate(rec)
    assert rec["failed_hosts"] == [gone]
    row = _status(rec, "preflight", gone)
    assert row["status"] == "FAIL" and "unreachable" in row["reason"] and "refused" in row["reason"]
    for host in cluster.hosts[:2]:
        assert _status(rec, "preflight", host)["status"] == "PASS"
    assert elapsed < 60, elapsed
    # Nothing after the failed preflight ran, every node still has its rows, and the way on is named.
    assert f"--exclude {gone}" in proc.stderr
    _every_node_listed(rec, cluster.hosts)
    assert {c["status"] for c in rec["checks"] if c["check"] not in ("preflight",)} == {"SKIP"}
    _junit_matches(junit, rec)


def test_a_node_slow_in_one_repeat_only_warns_and_says_how_often(cluster, tmp_path):
    """--repeats 2 with one host at a fifth of a core in the first round only: WARN, not FAIL, '1 of 2'."""
    import glob
    import subprocess
    import sys

    from tests.conftest import REPO

    slow = cluster.hosts[1]
    out = tmp_path / "results"
    with _half_a_cpu(cluster, slow, quota_us=20000) as cg:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", "validate", "--hostfile", str(cluster.hostfile), "--level", "quick",
             "--repeats", "2", "--out", str(out), "--json"],
            cwd=REPO, env=dict(cluster.env, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        try:
            # The first round's three single-node runs have recorded: lift the quota for the second.
            deadline = time.monotonic() + 300
            while len(glob.glob(str(out / "validate-*" / "runs" / "*" / "results.jsonl"))) < 3:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
                time.sleep(0.1)
            with open(f"{cg}/cpu.cfs_quota_us", "w") as f:
                f.write("-1")
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    rec = one_json(stdout)
    results.validate(rec)
    row = _status(rec, "throughput", slow)
    assert row["status"] == "WARN", row
    assert any(f"not PASS in 1 of 2 rounds ({first}, PASS)" in row["reason"] for first in ("FAIL", "WARN")), row
    for host in (cluster.hosts[0], cluster.hosts[2]):
        assert _status(rec, "throughput", host)["status"] == "PASS", _status(rec, "throughput", host)
    assert rec["measured"]["node_rounds"] == 2 and len(rec["measured"]["node_images_per_s_rounds"][slow]) == 2
