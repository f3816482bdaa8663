"""The fabric's design from the topology (issue 53 item 3): ibnetdiscover's port lines give each leaf's ports down to
HCAs and up to the spines at their rates (bench.cluster.ib_ports), the median leaf's ratio is the norm across leaves
(bench.validate.norm), and the leaves with fewer ports up than most are named. On a real fat tree's output
(tests/fixtures/topology: NVIDIA topograph's DGX H100 example, 31 leaves and 9 spines of Quantum-2 switches) and
the same with half of every leaf's cables up taken out."""

from __future__ import annotations

import re

import pytest

from bench.cluster import ib_ports, topology
from tests import scale_fixtures as sf

DGX = sf.FIX / "topology" / "ibnetdiscover_dgx-h100-fat-tree_nvidia-topograph.txt"


def _half_the_uplinks(text: str) -> str:
    """Every other port line of a leaf switch that goes to a spine taken out (their cables pulled)."""
    out, leaf, n = [], False, 0
    for line in text.splitlines():
        if line.startswith("Switch"):
            leaf, n = "IBLEAF" in line, 0
        elif leaf and re.match(r'^\[\d+\]\s+"S-', line) and "IBSPINE" in line:
            n += 1
            if n % 2:
                continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_real_fat_tree_is_built_one_to_one_and_its_leaves_short_of_cables_are_named():
    ratio, how = ib_ports.design(DGX.read_text())
    assert ratio == 1.0
    assert "the median of 31 leaves' ports down to HCAs over their ports up, 1.00:1 by rate" in how
    assert "12 leaves have fewer than 18 ports up (cables missing or down): A09-P1-IBLEAF-01-01 17, " \
           "A09-P1-IBLEAF-01-02 14" in how
    assert topology.read(str(DGX)).design == (ratio, how)


def test_half_the_cables_up_is_a_fabric_built_two_to_one(tmp_path):
    path = tmp_path / "half.ibnet"
    path.write_text(_half_the_uplinks(DGX.read_text()))
    ratio, _ = topology.read(str(path)).design
    assert ratio == pytest.approx(2.0, abs=0.15)


def test_a_topology_conf_says_no_design(tmp_path):
    """Slurm's topology.conf holds no link counts (LinkSpeed is one figure per switch, unused by Slurm)."""
    path = tmp_path / "topology.conf"
    path.write_text("SwitchName=leaf1 Nodes=node[01-32]\nSwitchName=leaf2 Nodes=node[33-64]\n"
                    "SwitchName=spine Switches=leaf[1-2]\n")
    tree = topology.read(str(path))
    assert tree.leaf_of["node40"] == "leaf2" and tree.design is None


@pytest.mark.parametrize("design, named", [(None, 0), (1.0, 32)])
def test_the_topologys_design_is_the_norm_across_leaves(design, named):
    """Every leaf's uplinks at half: a healthy 2:1 fabric to a judge that knows no design, every leaf named where
    the topology says the fabric is built 1:1 (quick, seed 0)."""
    v = sf.judge_only(sf.Fabric(uplink={k: 0.5 for k in range(32)}), 1000, 0, "quick", design=design)
    rows = [c for c in v.checks if c.check == "fabric" and c.host is None and c.node.startswith("leaf")]
    assert sum(c.status != "PASS" for c in rows) == named
    assert not any(c.status == "FAIL" for c in v.checks if c.host is not None)


def test_a_fabric_a_little_short_of_its_design_keeps_its_measured_norm():
    """Pairs across leaves at 85% of a 1:1 design (static routing's shared uplinks) are not every leaf slow: the
    design is the norm only where the pairs fall more than a quarter short of it."""
    v = sf.judge_only(sf.Fabric(oversub=0.85), 1000, 0, "quick", oversubscription=1)
    assert not [c for c in v.checks if c.status in ("WARN", "FAIL")]


def test_a_slow_leafs_row_names_its_cables_and_that_it_has_fewer_than_most():
    """leaf07's uplinks at half, its ports up as the real fabric's A09-P1-IBLEAF-01-02 has them (14, where most of
    its leaves have 18), the other leaves' as the others': the row names the ports and the cables short."""
    real = topology.read(str(DGX)).uplinks
    others = [k for k in sorted(real) if len(real[k]) == 18]
    ups = {f"leaf{k:02d}": real[others[k % len(others)]] for k in range(32)}
    ups["leaf07"] = real["A09-P1-IBLEAF-01-02"]
    v = sf.judge_only(sf.Fabric(uplink={7: 0.5}), 1000, 0, "quick", uplinks=ups)
    row = next(c for c in v.checks if c.check == "fabric" and c.node == "leaf07")
    assert row.status == "FAIL"
    assert "it has 14 ports up where most leaves have 18 (cables missing or down)" in row.reason
    assert "its 14 ports up: 35 to A10-P1-IBSPINE-02 port 9, 36 to A10-P1-IBSPINE-02 port 10" in row.action
    ok = next(c for c in v.checks if c.check == "fabric" and c.node == "leaf08")
    assert ok.status == "PASS"


def test_one_bad_uplink_s_nodes_are_held_with_the_leaf_s_ports_up_named_and_what_would_tell_which():
    """One of leaf07's uplinks at half, its ports up as the real fabric's: the 8 nodes behind it are held, the action
    names the leaf's ports up and says that which one is the leaf's forwarding table's to tell (ibnetdiscover gives
    cables, not routes)."""
    real = topology.read(str(DGX)).uplinks
    others = [k for k in sorted(real) if len(real[k]) == 18]
    ups = {f"leaf{k:02d}": real[others[k % len(others)]] for k in range(32)}
    v = sf.judge_only(sf.Fabric(port={(7, 1): 0.5}), 1000, 0, "full", uplinks=ups)
    row = next(c for c in v.checks if c.check == "fabric" and c.node == "leaf07")
    assert row.status in ("WARN", "FAIL") and "8 of its" in row.reason, row.reason
    assert "its 18 ports up: " in row.action and "which of the 18: the leaf's forwarding table" in row.action
    from bench.validate import drain
    assert drain.hosts_of(drain.drain_list(v.checks)) == []
    held = {c.host for c in v.checks if c.check == "fabric" and c.host is not None}
    assert held == {f"node{i:04d}" for i in range(7 * 32 + 8, 7 * 32 + 16)}, held  # uplink 1 of 4: nodes 8-15
