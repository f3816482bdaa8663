"""`bench validate` inside a real Slurm 22.05 allocation, with sshd stopped on every compute host: nothing can use ssh.

The allocation is the cluster (no --hostfile): 3 namespace hosts, 2 CPU slots each (salloc --ntasks-per-node=2).
Every stage runs as srun job steps (or mpirun, --launcher openmpi, whose daemons Slurm starts); preflight and
the inventory (with each node's health) go the same way. Faults come from outside bench: a CPU quota on one
rank's process (tests/faults.py), a drain by hand with scontrol.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from bench.core import results
from tests.conftest import REPO, one_json
from tests.faults import cpu_quota_on, exit_at_import

from .validate_runs import not_pass, row, said, skip_if_load_hid

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

SLOTS = 2
PER_GPU = ("throughput", "numerics", "matmul")


@contextlib.contextmanager
def no_ssh(cluster):
    """sshd stopped on every compute host for the block: a command that used ssh would fail."""
    for h in cluster.hosts:
        cluster.stop_sshd(h)
    try:
        yield
    finally:
        for h in cluster.hosts:
            cluster.start_sshd(h)


def validate_in_allocation(slurm, out, *extra: str, env: dict | None = None):
    proc = slurm.run_in_allocation([f"--ntasks-per-node={SLOTS}", sys.executable, "-m", "bench", "validate",
                                    "--level", "quick", "--json", "--out", str(out), *extra], nodes=3, cwd=REPO,
                                   timeout=900, env=env or slurm.env)
    rec = one_json(proc.stdout) if proc.stdout.strip() else None
    if rec is not None:
        results.validate(rec)
    return proc, rec


def _gpus(slurm) -> set[str]:
    return {f"{n}:{s}" for n in slurm.nodes for s in range(SLOTS)}


# Through mpirun every check but the data-parallel run: its launch is the intra-node check's (all ranks in one
# world, the same mpirun command) with another module, and a data-parallel run through mpirun is
# test_run_multihost's; here it would cost the suite a third start-up of six ranks (~45 s).
# Numerics rides the throughput launch. Its timed matmul on CPU ranks that mpirun starts beside each other FAILed a
# healthy rank at -46% against a 12% line in a clean-clone run (2026-12-07) when one timing was all it had; a matmul
# FAIL is now timed again (bench.validate.numerics._matmul), and only slow in both stands.
THROUGH_MPIRUN = ("--launcher", "openmpi", "--checks", "health,throughput,numerics,intra-node,inter-node,stragglers")


def test_validate_in_an_allocation_without_ssh_judges_every_gpu_and_drains_only_the_slow_ones_node(cluster, slurm,
                                                                                                 tmp_path):
    """Through srun, every check of the level, with local rank 1 of node2 at 15% of a core from its first timed step
    (~40% of its five peers, which share the rest of the two cores): every host:slot judged under the allocation's
    node names, each node's health read by its own probe, the pairs by Slurm's tree, every launch by srun; the slow
    GPU FAILs and --drain drains node2 with bench's reason, no ssh used; the data-parallel run takes the five good
    GPUs. Then the undrain (test_a_drained_node...). (This was two validates, a healthy one and the slow GPU's:
    the suite's budget. A healthy validate's exit 0 is test_validate's; mpirun's way in an allocation is
    test_a_node_whose_ranks_cannot_start...[openmpi]'s run.)"""
    launcher = "slurm"
    slow = cluster.hosts[1]
    node = slurm.nodes[1]
    try:
        with no_ssh(cluster), cpu_quota_on(cluster, slow, local_rank=1, module="bench.worker", quota_us=15000,
                                           after="start barrier") as moved:
            proc, rec = validate_in_allocation(slurm, tmp_path / "slow", "--drain")
        shown = slurm.run(["scontrol", "show", "node", node], timeout=15).stdout
    finally:  # the next tests allocate every node
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=15)
    assert moved, "the quota caught no rank"
    assert rec is not None, proc.stderr[-3000:]
    assert rec["launcher"] == launcher and rec["hosts"] == slurm.nodes
    for check in PER_GPU:  # every host:slot judged, under the allocation's node names
        assert {c["node"] for c in rec["checks"] if c["check"] == check and c["gpu"] is not None} == _gpus(slurm), \
            check
    # Each node's own health, read by its probe's process (CPU nodes: no GPU counters, said in the row).
    for n in slurm.nodes:
        assert row(rec, "health", n)["status"] == "PASS" and "no GPU on this node" in row(rec, "health", n)["reason"]
    assert rec["unknown"] == []
    # The pairs went by Slurm's own tree (conftest's slurm: node1 and node2 on leaf1, node3 on leaf2).
    topo = rec["topology"]
    assert topo["source"] == "scontrol show topology" and topo["uplinks_covered"] is True, topo
    assert topo["leaf_of"] == dict(zip(slurm.nodes, ("leaf1", "leaf1", "leaf2"))), topo
    assert topo["up"] == {"leaf1": ["spine"], "leaf2": ["spine"]} and topo["unplaced"] == [], topo
    _went_the_launchers_way(rec, slurm, launcher)
    skip_if_load_hid(rec, f"{node}:1")
    assert proc.returncode == 1 and rec["exit_status"] == 1, proc.stderr[-3000:] + said(not_pass(rec))
    r = row(rec, "throughput", f"{node}:1")
    assert r["status"] == "FAIL" and "FAIL below" in r["reason"], r
    assert row(rec, "throughput", f"{node}:0")["status"] == "PASS"
    assert rec["nodes"][node]["verdict"] == "drain" and rec["exclude"] == f"{node}:1"
    assert {h: n["verdict"] for h, n in rec["nodes"].items() if h != node} == \
        dict.fromkeys([n for n in slurm.nodes if n != node], "healthy"), said(not_pass(rec))
    assert rec["measured"]["dp"]["world_size"] == 3 * SLOTS - 1
    assert "DRAIN" in shown and "Reason=bench validate: throughput (GPU 1)" in shown, shown


def _went_the_launchers_way(rec: dict, slurm, launcher: str) -> None:
    """Every launch went the launcher's way, and the preflight with it."""
    first = "srun" if launcher == "slurm" else "mpirun"
    assert all(f"({first})" in row(rec, "preflight", n)["reference"] for n in slurm.nodes)
    for tag, run_dir in rec["runs"].items():
        plan = results.read(f"{run_dir}/results.jsonl").records[-1]["plan"]
        argv = plan["command"]
        assert argv[0] == first or ("--launcher" in argv and argv[argv.index("--launcher") + 1] == launcher), \
            (tag, argv)


@pytest.mark.parametrize("launcher", ["slurm", "openmpi"])
def test_a_node_whose_ranks_cannot_start_is_unknown_and_the_others_are_judged(cluster, slurm, tmp_path, launcher):
    """node3's Python exits as it imports bench's rank code (a broken install on one node; its preflight and
    inventory, which never import it, answer). The per-GPU launch's ranks are independent: node3's exit must not
    end the others' (srun --kill-on-bad-exit, mpirun's abort on a non-zero exit did). node3 unknown with its
    reason, node1 and node2 healthy, exit 3.

    Through mpirun (--launcher openmpi: Slurm starts its daemons, no ssh) the run takes the checks of the healthy
    mpirun validate it replaces (THROUGH_MPIRUN), so it is also mpirun's way through a validate in an allocation:
    every launch and the preflight by mpirun, each node's health read, the two good nodes' pair measured (the
    data-parallel run through mpirun is test_run_multihost's)."""
    broken = slurm.nodes[2]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(exit_at_import("bench.worker", hostname=broken))
    # Every node's Python finds the file (one filesystem); only node3's acts on it. This checkout next: the ranks
    # run the code under test, not the installed one.
    env = dict(slurm.env, PYTHONPATH=os.pathsep.join([str(site), REPO]))
    with no_ssh(cluster):
        proc, rec = validate_in_allocation(slurm, tmp_path / "out",
                                           *(THROUGH_MPIRUN if launcher == "openmpi" else ("--checks", "throughput")),
                                           env=env)
    assert rec is not None, proc.stderr[-3000:]
    assert proc.returncode == 3 and rec["exit_status"] == 3, proc.stderr[-3000:] + said(not_pass(rec))
    for s in range(SLOTS):
        r = row(rec, "throughput", f"{broken}:{s}")
        assert r["status"] == "ERROR" and "never started" in r["reason"], r
    node = rec["nodes"][broken]
    assert node["verdict"] == "unknown" and node["not_checked"][0]["check"] == "throughput", node
    assert "never started" in node["not_checked"][0]["reason"], node
    for n in slurm.nodes[:2]:
        assert rec["nodes"][n]["verdict"] == "healthy", said(not_pass(rec))
        assert {row(rec, "throughput", f"{n}:{s}")["status"] for s in range(SLOTS)} == {"PASS"}, said(not_pass(rec))
    assert rec["unknown"] == [broken] and rec["drain"] == []
    # Every rank that started said it ended: no node is reached over ssh to stop one (sshd is stopped here, and the
    # run's error read "host node1 stopped answering" when it tried).
    assert "stopped answering" not in json.dumps(rec["runs"]), rec["runs"]
    if launcher == "openmpi":
        for n in slurm.nodes:  # the probe never imports bench's rank code: node3's health is read too
            assert row(rec, "health", n)["status"] == "PASS", row(rec, "health", n)
        assert row(rec, "inter-node", f"{slurm.nodes[0]}+{slurm.nodes[1]}")["status"] == "PASS", said(not_pass(rec))
        assert row(rec, "training", "cluster")["status"] == "SKIP" and "training" not in rec["runs"], rec["runs"]
        _went_the_launchers_way(rec, slurm, launcher)


def _on_node(cluster, slurm, host: str, argv: list[str]) -> subprocess.CompletedProcess:
    """argv run on the node itself (its network and hostname), as slurmd runs a HealthCheckProgram: no ssh."""
    name = cluster.hostnames[cluster.hosts.index(host)]
    return subprocess.run(["nsenter", f"--net=/run/netns/{cluster.ns_of(host)}", "unshare", "--uts", "sh", "-c",
                           f'hostname {name} && exec "$@"', "sh", *argv], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=slurm.env)


def test_a_drained_node_checked_on_itself_with_undrain_returns_and_one_drained_by_hand_stays(cluster, slurm,
                                                                                               tmp_path):
    """node2 drained as the slow GPU's validate drains it (its reason, which that test reads back from scontrol;
    that test returns it to service, as the allocations of the tests between need every node). Checked on itself
    (as a HealthCheckProgram would run it) with --undrain: back in service. A node drained by hand for another
    reason is left drained by the same command."""
    slow = cluster.hosts[1]
    node, other = slurm.nodes[1], slurm.nodes[2]
    try:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                   "Reason=bench validate: throughput (GPU 1)"])
        slurm.run(["scontrol", "update", f"NodeName={other}", "State=DRAIN", "Reason=fan replaced by hand"])
        for host, resumed, why in ((slow, True, "bench drained it"), (cluster.hosts[2], False, "another reason")):
            got = _on_node(cluster, slurm, host, [sys.executable, "-m", "bench", "validate", "--checks", "throughput",
                                                  "--undrain", "--json", "--out", str(tmp_path / host)])
            assert got.returncode == 0, got.stderr[-3000:]
            back = one_json(got.stdout)
            assert back["launcher"] == "local" and back["nodes"]["localhost"]["verdict"] == "healthy"
            (done,) = back["resumed"]
            assert done["node"] == slurm.nodes[cluster.hosts.index(host)] and done["resumed"] is resumed \
                and why in done["why"], done
        states = slurm.states()
        assert states[node] == "idle" and states[other].startswith("drain"), states
    finally:
        for n in (node, other):
            slurm.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], timeout=15)
