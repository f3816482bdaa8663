"""`bench probe` across real namespace hosts: over ssh (--launcher pdsh) and over mpirun (a rank per host)."""

from __future__ import annotations

import pytest

from tests.conftest import bench, one_json

pytestmark = [pytest.mark.multihost]


@pytest.mark.parametrize("launcher", ["pdsh", "openmpi"])
def test_probe_lists_each_host_once(cluster, launcher):
    proc = bench("probe", "--hostfile", str(cluster.hostfile), "--launcher", launcher, "--json",
                 env=cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = one_json(proc.stdout)
    assert [n["host"] for n in doc["nodes"]] == cluster.hosts
    # Each inventory came from its own host (its own UTS hostname and address).
    assert [n["hostname"] for n in doc["nodes"]] == cluster.hostnames
    assert doc["unreachable"] == {}
    # No GPU anywhere: a CPU-only cluster, uniform because every node runs the same versions.
    assert doc["verdict"]["gpus"] == 0 and doc["verdict"]["uniform"] is True


def test_probe_names_a_host_that_does_not_answer(cluster_factory):
    c = cluster_factory(2)
    c.stop_sshd(c.hosts[1])
    proc = bench("probe", "--hostfile", str(c.hostfile), "--json", "--probe-timeout", "15", env=c.env, timeout=120)
    assert proc.returncode == 1
    doc = one_json(proc.stdout)
    assert list(doc["unreachable"]) == [c.hosts[1]] and [n["host"] for n in doc["nodes"]] == [c.hosts[0]]
    assert doc["verdict"]["level"] == "fail"


def test_probe_health_sends_since_to_every_node(cluster):
    """--health --since over ssh: each node's own probe gets the time (HealthAsk.argv) and reads its kernel log
    from there; the time comes back as that node read it, whatever the node's zone."""
    proc = bench("probe", "--hostfile", str(cluster.hostfile), "--launcher", "pdsh", "--health",
                 "--since", "2026-12-02T10:00+00:00", "--json", env=cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]  # probe exits 1 only for a node it could not reach
    doc = one_json(proc.stdout)
    assert [n["host"] for n in doc["nodes"]] == cluster.hosts
    for node in doc["nodes"]:
        health = node["health"]
        assert health["since"] == "2026-12-02T10:00:00+00:00", (node["host"], health)
        sources = set(health["read"]) | {m["source"] for m in health["not_read"]}
        assert "kernel-log" in sources, (node["host"], health)
