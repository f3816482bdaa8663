"""`bench validate` on real hosts (netns + sshd, see netns.py): healthy, a throttled link, a dead sshd.

Each scenario runs validate once (quick level: the micro ViT, synthetic
data, two message sizes) with the cluster's env: the ssh wrapper first on
PATH and GLOO_SOCKET_IFNAME=vb0. The hosts share this machine's cores, so
per-node figures are judged against each other with generous tolerances;
the broken host is made broken enough (a 1 Mbit/s link, no sshd) that no
contention can hide it.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

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


def test_healthy_cluster_passes_with_every_check_listed(cluster, tmp_path):
    proc, rec, junit = _validate(cluster, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    results.validate(rec)
    assert rec["kind"] == "validate" and rec["result"] in ("PASS", "WARN") and rec["failed_hosts"] == []
    _every_node_listed(rec, cluster.hosts)
    assert all(c["status"] in ("PASS", "WARN") for c in rec["checks"]), rec["checks"]
    assert _status(rec, "training", "cluster")["status"] == "PASS"
    assert rec["measured"]["dp"]["world_size"] == 3
    assert rec["measured"]["scaling"]["predicted"] > 0 and rec["measured"]["scaling"]["measured"] > 0
    # Every check's figure came from a run recorded in the validate folder.
    for run_dir in rec["runs"].values():
        assert results.read(f"{run_dir}/results.jsonl").records[-1]["status"] == "ok"
    _junit_matches(junit, rec)


def test_throttled_link_is_named_and_left_out(cluster, tmp_path):
    slow = cluster.hosts[1]
    tbf = ["tc", "qdisc", "add", "dev", "vb0", "root", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"]
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
    _junit_matches(junit, rec)


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
