"""`bench probe` across real namespace hosts: over ssh (--launcher pdsh) and over mpirun (mpi4py)."""

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
