"""A container across real hosts (netns + sshd): every rank starts through the container binary, and a site
profile alone says how (issue 54: no option on the command line).

    # site.toml, named by $BENCH_CONFIG
    hostfile = "/tmp/.../hostfile"
    launcher = "openmpi"                                  # or pdsh
    container-exec = "/tmp/.../fakebin/apptainer exec /tmp/.../vit.sif"
    master-addr = "10.77.0.2"
    [run]
    dataset = "synthetic" ...
    bench run

`apptainer` is a stand-in (tests/multihost/fake_apptainer.py): it proves which command runs on which host,
through which prefix, with which arguments, nothing about Apptainer itself.
"""

from __future__ import annotations

import os

import pytest

from bench.core import results
from tests.conftest import FAST, bench, one_json

from . import fake_apptainer, site_profile

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


@pytest.fixture
def fake(cluster, tmp_path) -> fake_apptainer.FakeApptainer:
    return fake_apptainer.install(tmp_path, cluster.env)


@pytest.mark.parametrize("launcher", ["openmpi", "pdsh"])
def test_ranks_start_through_the_container_binary(cluster, out_dir, fake, tmp_path, launcher):
    image, calls = fake.image, fake.calls
    # The master address is the first host's own: the namespace hosts have one address each (netns.py), and a
    # rendezvous anywhere else would find no rank 0. What the profile changes is who said it (rec["sources"]).
    site = {"hostfile": str(cluster.hostfile), "launcher": launcher, "container-exec": fake.exec_prefix,
            "master-addr": cluster.hosts[0], "out": out_dir}
    profile = site_profile.write(tmp_path / "site.toml", site, run={
        "dataset": "synthetic", **site_profile.options(FAST), "steps": 10, "json": True})
    proc = bench("run", env=dict(fake.env, BENCH_CONFIG=str(profile)), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "ok" and rec["figures"]["world_size"] == 3
    assert rec["plan"]["container"] == [fake.binary, "exec", "-B", os.path.abspath(out_dir), image]
    assert rec["plan"]["launcher"] == launcher and rec["plan"]["master_addr"] == cluster.hosts[0]
    # Every value from the profile, none from the command line, each said so in the record.
    assert rec["sources"] == dict.fromkeys(("launcher", "container_exec", "master_addr", "out", "model", "dataset",
                                            "synthetic_size", "steps", "micro_batch", "hostfile", "json"),
                                           site_profile.came_from(profile)), rec["sources"]

    # Every command bench ran on a host went through the stand-in: the preflight, the
    # inventory, and one start per host (mpirun each rank; pdsh each node's launcher, bench.launch.node).
    lines = calls.read_text().splitlines()
    entry = {"openmpi": "-m bench.worker --run-dir", "pdsh": "-m bench.launch.node --world-info="}[launcher]
    starts = [line for line in lines if entry in line]
    assert sorted(line.split()[0] for line in starts) == cluster.hostnames, lines
    assert all(f"nv=no {image} python -u {entry}" in line for line in starts), lines
    for what in (f"{image} python -c", "-m bench probe --local --json" if launcher == "pdsh" else "-m bench.cluster.probe_mpi"):
        assert sorted(line.split()[0] for line in lines if what in line) == cluster.hostnames, (what, lines)

    # Each rank, on its own node, ran inside the stand-in (only it sets APPTAINER_CONTAINER).
    for rank in range(3):
        with open(os.path.join(rec["run_dir"], "logs", f"rank{rank}.log")) as f:
            starting = next(line for line in f if "worker pid" in line)
        assert f"in container {image}" in starting, starting
    assert {d["host"] for d in rec["provenance"]["devices"]} == set(cluster.hostnames)
