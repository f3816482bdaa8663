"""Issue 45 at 1,000 nodes x 8 GPUs in leaves of 32 (tests/scale_fixtures.py's fabric): a slow leaf switch is named
and drains no node, a bad NIC inside it still drains alone, an oversubscribed fabric is healthy, a hostfile in leaf
order without a topology says its uplinks were not covered, and a NIC slow in half of its looks is caught at full.

(a)-(d) run the whole of bench validate on the fixtures (inter-node only: the other checks are issue 40's tests);
(e) runs the inter-node check alone, forty times, with every look answered from the fabric model directly (bench's
own rows_from_summary over 8,000 ranks is the scale test's, not this one's)."""

from __future__ import annotations


import pytest

from tests import scale_fixtures as sf

NODES = 1000
BAD_LEAF = 7                       # node0224-node0255
IN_BAD_LEAF = "node0230"


def _validate(tmp_path, fabric: sf.Fabric, topology: bool = True, level: str = "quick"):
    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = sf.Cluster(NODES, fabric=fabric, bad={})
    cfg = ValidateConfig(level=level, checks=("inter-node",), out=str(tmp_path / "results"),
                         topology=cluster.topology(str(tmp_path)) if topology else None,
                         drain_file=str(tmp_path / "drain.txt"))
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        return stages.validate(cfg, HostSelection(hostfile=cluster.hostfile(str(tmp_path))))


def _fabric(rec) -> dict[str, dict]:
    return {c["node"]: c for c in rec["checks"] if c["check"] == "fabric" and c["host"] is None}


def _leaf(i: int) -> list[str]:
    return [sf.host(k) for k in range(32 * i, 32 * i + 32)]


def test_a_a_leaf_whose_uplinks_run_at_half_is_named_and_drains_no_node(tmp_path):
    rec = _validate(tmp_path, sf.Fabric(uplink={BAD_LEAF: 0.5}))
    leaves = _fabric(rec)
    assert {n for n, c in leaves.items() if c["status"] != "PASS"} == {"leaf07"}
    row = leaves["leaf07"]
    assert row["status"] == "FAIL" and "switch leaf07's uplinks to spine0, not its nodes" in row["reason"], row
    assert row["action"].startswith("check switch leaf07's uplinks to spine0")
    assert leaves["cluster"]["status"] == "PASS"
    assert rec["drain"] == [] and (tmp_path / "drain.txt").read_text() == ""
    assert rec["exit_status"] == 1, "a leaf switch that FAILs fails the run"
    assert {h for h, n in rec["nodes"].items() if n["verdict"] != "healthy"} == set(_leaf(BAD_LEAF))
    held = rec["nodes"]["node0224"]
    assert held["verdict"] == "degraded" and held["action"].startswith("held, not drained: check switch leaf07")


def test_b_a_slow_nic_inside_the_slow_leaf_is_drained_alone_and_the_leaf_still_named(tmp_path):
    rec = _validate(tmp_path, sf.Fabric(uplink={BAD_LEAF: 0.5}, nic={IN_BAD_LEAF: 0.5}))
    assert [e["host"] for e in rec["drain"]] == [IN_BAD_LEAF]
    leaves = _fabric(rec)
    assert {n for n, c in leaves.items() if c["status"] != "PASS"} == {"leaf07"}
    assert f"({IN_BAD_LEAF} short inside it too: judged on its own)" in leaves["leaf07"]["reason"]
    assert rec["held"] is None and rec["exit_status"] == 1


def test_c_an_oversubscribed_fabric_is_healthy_and_its_share_is_shown(tmp_path):
    rec = _validate(tmp_path, sf.Fabric(oversub=0.5))
    assert rec["exit_status"] == 0 and rec["drain"] == []
    assert {n["verdict"] for n in rec["nodes"].values()} == {"healthy"}
    assert {c["status"] for c in _fabric(rec).values()} == {"PASS"}
    assert "pairs across leaves run at 50% of those inside" in _fabric(rec)["cluster"]["reason"]


def test_d_without_a_topology_the_record_says_the_uplinks_were_not_covered(tmp_path, capsys):
    """The hostfile is in leaf order; without a topology bench cannot choose pairs across leaves, says so, and does
    not keep the hostfile's order (which would leave 968 of the 1,000 ring pairs inside a leaf)."""
    rec = _validate(tmp_path, sf.Fabric(uplink={BAD_LEAF: 0.5}), topology=False)
    # The slow leaf's 32 nodes are an island (bench.validate.islands): every pair of theirs with the others slow,
    # every other fast, a cut no node explains: named, no node held for it.
    fabric = _fabric(rec)
    assert set(fabric) == {"cluster"} and fabric["cluster"]["status"] == "WARN", fabric
    assert fabric["cluster"]["reference"] == "2 islands of 968, 32 nodes", fabric["cluster"]
    assert f"node{BAD_LEAF * 32:04d}" in fabric["cluster"]["reason"].split("|")[1]
    assert rec["topology"]["uplinks_covered"] is False and rec["pairing"]["order"].startswith("shuffled")
    assert "uplinks not covered" in capsys.readouterr().err


def test_drains_concentrated_on_one_leaf_are_held_and_named_as_that_leaf(tmp_path):
    """The leaf switch itself (its nodes slow inside it too): 32 nodes would drain, 3% of 1,000, under --max-drain's
    10%; the breaker sees that they all hang off leaf07 and holds them."""
    rec = _validate(tmp_path, sf.Fabric(nic={h: 0.3 for h in _leaf(BAD_LEAF)}))
    drained = {e["host"] for e in rec["drain"]}
    # Every pair inside leaf07 is slow: every other node of its ring explains both of its pairs (blamed); the rest
    # were short with blamed partners only, with no good node of their leaf to tell them apart: WARN, never healthy.
    assert len(drained) >= 16 and drained <= set(_leaf(BAD_LEAF))
    assert {rec["nodes"][h]["verdict"] for h in _leaf(BAD_LEAF)} <= {"drain", "degraded"}
    held = rec["held"]
    assert held is not None and set(held["held"]) == drained and list(held["leaves"]) == ["leaf07"]
    assert f"{len(drained)} of the 32 nodes on leaf switch leaf07 would drain at once" in held["reason"]
    assert (tmp_path / "drain.txt").read_text().count("# held node") == len(drained)
    assert rec["drained"] is None and rec["exit_status"] == 1


# --------------------------------------------------------------------------- (e) intermittent: the share of looks
FLAKY = "node0500"
SEEDS = 5   # 20 and 50 seeds: benchmarks/intermittent_links.py (benchmarks/README.md), a second a check here


def test_e_a_nic_slow_in_half_of_its_looks_is_caught_and_a_healthy_fabric_gives_no_false_alarm():
    """At full (each of 6 pairs looked at the level's times, the pairs in doubt as many times again, bisection): the
    flaky NIC caught in every seed at NCCL's noise (19 of 20 and more in benchmarks/README.md); no other node FAILs
    beside it; and no node of a healthy fabric WARNs or FAILs, even at the noise measured here over gloo, 30 times
    NCCL's (the lines widen with what the passes show)."""
    caught, false_alarms = 0, []
    for seed in range(SEEDS):
        rows = sf.inter_only(sf.Fabric(flaky={FLAKY: 0.5}, noise=sf.LOOK_NOISE_NCCL), NODES, seed)
        caught += rows[FLAKY].status != "PASS"
        assert all(c.status != "FAIL" for h, c in rows.items() if h != FLAKY), seed
        healthy = sf.inter_only(sf.Fabric(noise=sf.LOOK_NOISE_HERE), NODES, seed)
        false_alarms += [(seed, c.node, c.status, c.reason) for c in healthy.values() if c.status != "PASS"]
    assert caught == SEEDS, f"caught in {caught} of {SEEDS} seeds"
    assert false_alarms == []


def test_the_simulation_benchmark_runs_at_its_smallest_size(monkeypatch, capsys):
    """benchmarks/intermittent_links.py's smoke run: 64 nodes, one seed, two numbers of looks (its figures at 1,000
    nodes and 20-50 seeds are in benchmarks/README.md)."""
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["intermittent_links.py", "--nodes", "64", "--seeds", "1", "--looks", "1,4",
                                      "--noise", "0.01"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(sf.FIX.parent.parent / "benchmarks" / "intermittent_links.py"), run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "looks  noise   caught false WARN false FAIL" in out and "64 nodes x 8" in out
    assert len([ln for ln in out.splitlines() if ln.strip().startswith(("1 ", "4 "))]) == 2


# --------------------------------------------------------------------------- issue 53: what the topology does not say
@pytest.mark.parametrize("fabric", [sf.Fabric(oversub=0.5), sf.Fabric(uplink={BAD_LEAF: 0.5})],
                         ids=["2:1", "slow leaf07"])
def test_a_host_the_topology_does_not_place_is_named_in_the_plan_and_never_drained(tmp_path, capsys, fabric):
    """The hostfile says node230, topology.conf node0230 (the same machine, on leaf07): bench cannot tell its pairs'
    path, so it judges them as across leaves, names it in the plan, and never drains it for the fabric (issue 53:
    drained under a 2:1 fabric and under a slow leaf07 in 3 of 3 seeds)."""
    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = sf.Cluster(NODES, fabric=fabric, bad={})
    cluster.hosts[230] = "node230"
    cluster.index = {h: i for i, h in enumerate(cluster.hosts)}
    cfg = ValidateConfig(level="quick", checks=("inter-node",), out=str(tmp_path / "results"),
                         topology=cluster.topology(str(tmp_path)), drain_file=str(tmp_path / "drain.txt"))
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        rec = stages.validate(cfg, HostSelection(hostfile=cluster.hostfile(str(tmp_path))))
    assert "does not place node230" in capsys.readouterr().err
    assert rec["topology"]["unplaced"] == ["node230"]
    assert rec["drain"] == [] and rec["nodes"]["node230"]["verdict"] in ("healthy", "degraded")
    if fabric.oversub < 1:
        assert {n["verdict"] for n in rec["nodes"].values()} == {"healthy"} and rec["exit_status"] == 0


def test_quick_meets_most_leaf_pairs_and_another_seed_others():
    """The ring visits the leaves in a seeded order per turn: at 1,000 nodes on 32 leaves it meets over 400 of the 496
    leaf pairs (leaf k beside leaf k+1 in every turn met 32), and three seeds nearly all."""
    from bench.validate import pairing

    leaves = [f"leaf{i // 32:02d}" for i in range(NODES)]
    met = []
    for seed in (1, 2, 3):
        rounds = pairing.first_rounds("ring", NODES, seed, leaves=leaves)
        seen, total = pairing.coverage(rounds, leaves)
        assert total == 496 and seen >= 400, (seed, seen)
        met.append({frozenset((leaves[a], leaves[b])) for r in rounds for a, b in r if leaves[a] != leaves[b]})
    assert len(met[0] | met[1] | met[2]) >= 490, "three seeds meet nearly every leaf pair"
