"""Where nodes hang in the fabric: Slurm's hostlists and topology.conf read as Slurm reads them (against what the
real slurmctld said of the same files), `scontrol show topology` and ibnetdiscover outputs recorded on real
systems, and what validate does without any (a seeded ring, "uplinks not covered").

The recorded outputs and where each came from: tests/fixtures/topology/SOURCES.md.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bench.cluster import hostlist, topology
from bench.cluster.topology import Tree
from bench.core import results
from bench.core.errors import BadInput
from bench.validate import pairing, tree
from bench.validate.config import ValidateConfig
from tests.conftest import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
CONF = FIX / "conf"


# --------------------------------------------------------------------------- Slurm's hostlists
@pytest.mark.parametrize("text, names", [
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("n[08-10],login1", ["n08", "n09", "n10", "login1"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("r[1-2]n[1,3]", ["r1n1", "r1n3", "r2n1", "r2n3"]),
    ("gpu[01-02]-ib", ["gpu01-ib", "gpu02-ib"]),        # a suffix: Slurm 23.02 on
    ("a b\tc", ["a", "b", "c"]),                          # white space separates too (a quoted value)
    ("", []),
])
def test_hostlists_expand_as_slurm_expands_them(text, names):
    assert hostlist.expand(text) == names


@pytest.mark.parametrize("text, why", [
    ("leaf[a-c]", "is not a number"), ("n[1-x]", "is not a number"), ("n[3-1]", "runs backwards"),
    ("n[1-2", "unbalanced"), ("n1]", "unbalanced"), ("n[]", "empty bracket"), ("n[-1]", "is not a number"),
    ("n[1,,2]", "is not a number"), ("n[0-70000]", "more than 65536"), ("a[0-300]b[0-300]", "more than 65536"),
])
def test_a_hostlist_slurm_cannot_read_is_refused_saying_why(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        hostlist.expand(text)


# --------------------------------------------------------------------------- topology.conf against slurmctld
def _slurmctld() -> dict[str, str]:
    """{file: "started" or "refused: <its error>"}, as tests/multihost/topology_verdicts.py recorded them."""
    out = {}
    for line in (FIX / "slurmctld-verdicts.txt").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            name, _, said = line.partition(" ")
            out[name] = said
    return out


# Where bench does not do what Slurm 22.05.8 did, and why (each checked against the recorded verdict below).
STRICTER = {
    "multi_homed_node.conf": "Slurm only warns (Multiple leaf switches contain nodes); a pair is judged by its "
                             "nodes' leaves, so bench needs one per node",
    "bad_nodes_unclosed.conf": "22.05 takes 'node[1-2' as a node named 'node]' (and warns it is no node); "
                               "Slurm 23.02 on refuses it",
    "bad_name_too_long.conf": "Slurm 23.02 on refuses a SwitchName of 64 characters or more",
    "bad_no_switch.conf": "22.05 logs 'No switches configured' and runs without a tree; 23.02 on refuses it",
}
LAXER = {"suffix_after_bracket.conf": "22.05 refuses a suffix after a bracket; Slurm 23.02 on reads gpu[01-02]-ib"}


@pytest.mark.parametrize("case", sorted(p.name for p in CONF.glob("*.conf")))
def test_topology_conf_is_refused_where_slurmctld_refused_it(case):
    said = _slurmctld()[case]
    try:
        topology.read(str(CONF / case))
        refused = None
    except BadInput as e:
        refused = str(e)
    if case in STRICTER:
        assert said == "started" and refused, (said, refused)
    elif case in LAXER:
        assert said.startswith("refused") and refused is None, (said, refused)
    else:
        assert (refused is None) == (said == "started"), (said, refused)
    if refused:  # one line that names the option and the file (and its line, where one line is at fault)
        assert refused.startswith(f"--topology: {CONF / case}") and "\n" not in refused


@pytest.mark.parametrize("case, needle", [
    ("bad_switch_twice.conf", ":2: switch leaf1 is defined already at "),
    ("bad_switches_letters.conf", ":3: Switches=leaf[a-b]: "),
    ("bad_nodes_letters.conf", ":1: Nodes=node[a-b]: "),
    ("bad_unknown_key.conf", ":1: unknown key 'Speed'"),
    ("bad_not_key_value.conf", ":2: expected 'SwitchName=NAME"),
    ("bad_nodes_and_switches.conf", ":1: switch leaf1 has both"),
    ("bad_no_children.conf", ":2: switch lonely has neither"),
    ("bad_child_undefined.conf", ":2: switch spine has an invalid child 'leaf2'"),
    ("bad_loop.conf", ": not a tree"),
    ("bad_linkspeed.conf", ":1: LinkSpeed=fast"),
    ("bad_empty_value.conf", ":1: cannot read 'Nodes='"),
    ("bad_random_bytes.conf", ":1: not text"),
    ("multi_homed_node.conf", ":2: node2 is on leaf1 already"),
])
def test_each_refusal_names_the_file_and_line(case, needle):
    with pytest.raises(BadInput, match=re.escape(f"--topology: {CONF / case}") + ".*" + re.escape(needle)):
        topology.read(str(CONF / case))


def test_slurms_own_syntax_reads_the_same_tree():
    suite = topology.read(str(CONF / "ok_suite.conf"))
    for other in ("ok_slurm_syntax.conf", "ok_include.conf"):
        got = topology.read(str(CONF / other))
        assert got.leaf_of == suite.leaf_of, other
    assert topology.read(str(CONF / "ok_slurm_syntax.conf")).up == suite.up == {"leaf1": ("spine",),
                                                                                  "leaf2": ("spine",)}
    assert suite.source == f"topology.conf {CONF / 'ok_suite.conf'}" and suite.parent("leaf1") == "spine"
    two = topology.read(str(CONF / "ok_two_spines.conf"))
    assert two.above("leaf1") == ("spine1", "spine2") and two.parent("leaf1") is None, "a fat tree: no one parent"


# --------------------------------------------------------------------------- scontrol show topology
def test_scontrol_show_topology_from_the_suites_slurm():
    got = topology.from_scontrol((FIX / "scontrol-show-topology_tree_2-leaves-1-spine.txt").read_text())
    assert got == Tree(leaf_of={"node1": "leaf1", "node2": "leaf1", "node3": "leaf2"},
                       up={"leaf1": ("spine",), "leaf2": ("spine",)}, source="scontrol show topology")
    # Without the tree plugin scontrol prints nothing on stdout (its error goes to stderr): no tree.
    assert topology.from_scontrol((FIX / "scontrol-show-topology_no-tree-plugin.stdout.txt").read_text()) is None


# --------------------------------------------------------------------------- ibnetdiscover
def _ibnet(name: str) -> Tree:
    return topology.read(str(FIX / f"ibnetdiscover_{name}.txt"))


def test_ibnetdiscover_of_a_dgx_fat_tree_gives_each_hca_its_leaf_and_each_leaf_its_spines():
    t = _ibnet("dgx-h100-fat-tree_nvidia-topograph")
    assert t.source.startswith("ibnetdiscover ")
    # A rail-optimised fabric: each HCA of a node on another leaf; the node is on its first HCA's.
    node = t.hcas["a06-p1-dgx-02-c01"]
    assert (node["HCA-1"], node["HCA-6"]) == ("A09-P1-IBLEAF-01-02", "A09-P1-IBLEAF-04-02")
    assert list(node)[0] == "HCA-1" and t.leaf_of["a06-p1-dgx-02-c01"] == "A09-P1-IBLEAF-01-02"
    assert list(t.hcas["B11-P1-CUFM-02"]) == ["mlx5_0", "mlx5_1"], "natural order of the HCAs' names"
    # The leaves' uplinks go to the spines (MF0;<name>:<model>/U1 names a managed switch); no spine is a leaf.
    leaves = {x for m in t.hcas.values() for x in m.values()}
    assert all("IBLEAF" in x for x in leaves) and len(leaves) == 31
    assert set(t.up) == leaves and all(all("IBSPINE" in s for s in t.up[x]) for x in leaves)
    text = (FIX / "ibnetdiscover_dgx-h100-fat-tree_nvidia-topograph.txt").read_text()
    block = text[text.index("IBLEAF-04-04:MQM9701/U1\" enhanced"):].split("\n\n")[0]  # that leaf's own ports
    assert set(t.above("A09-P1-IBLEAF-04-04")) == set(re.findall(r"MF0;(A10-P1-IBSPINE-\d+|B10-P1-IBSPINE-\d+)",
                                                                   block))
    assert len(t.above("A09-P1-IBLEAF-04-04")) > 1 and t.parent("A09-P1-IBLEAF-04-04") is None
    # HCAs left with the adapter's default description, and SHARP's aggregation nodes, place no host.
    assert not any(h.startswith(("MT4129", "Mellanox")) for h in t.leaf_of)


def test_ibnetdiscover_of_small_fabrics_from_vendor_docs():
    ibm = _ibnet("ibm-two-hosts-one-switch")
    assert ibm.leaf_of == {"compute-00-00": "S-000b8cffff0053ee", "compute-00-01": "S-000b8cffff0053ee"}
    two = _ibnet("nvidia-ibdiagpath-two-switches")  # a tool's warning as its first line; a port looped back
    assert two.leaf_of == {"r-ufm100": "switch-de779e", "r-ufm101": "switch-de779e", "r-ufm96": "switch-de779e",
                           "r-ufm111": "S-e41d2d030003e470", "r-ufm216": "S-e41d2d030003e470"}
    assert two.up == {}, "two leaves cabled to each other: neither is above the other"
    assert _ibnet("oracle-one-host").leaf_of == {"nsn33-43": "S-0021283a8389a0a0"}


@pytest.mark.parametrize("name, why", [("man-page_no-host-names", "no HCA on a switch names its host"),
                                       ("gb200-hca-without-cable_nvidia-topograph", "no HCA on a switch names")])
def test_an_ibnetdiscover_output_that_places_no_host_is_refused(name, why):
    with pytest.raises(BadInput, match=why):
        _ibnet(name)


# --------------------------------------------------------------------------- the tree and the record
def test_hosts_are_placed_by_name_or_the_hostname_they_gave_and_the_record_keeps_the_validated_ones():
    t = topology.read(str(CONF / "ok_node_not_in_slurm_conf.conf"))
    hosts, hostname_of = ["node1", "10.0.0.3", "node7"], {"10.0.0.3": "node3.cluster"}
    assert t.leaves(hosts, hostname_of) == ["leaf1", "leaf2", None]
    assert t.unplaced(hosts, hostname_of) == ["node7"]
    rec = tree.record(tree.Found(t), hosts, hostname_of, seed=1)
    assert rec["leaf_of"] == {"node1": "leaf1", "10.0.0.3": "leaf2"} and rec["unplaced"] == ["node7"]
    assert rec["uplinks_covered"] is True and rec["ring"] == "every pair: no order to choose"  # three hosts
    assert tree.record(tree.Found(t), [*hosts, "node2"], hostname_of, seed=1)["ring"] == "across leaf switches"


def test_without_a_topology_the_record_says_the_uplinks_were_not_covered_and_the_ring_is_shuffled():
    found = tree.find(ValidateConfig(level="quick"), nodes=4, environ={"PATH": "/nonexistent"})
    assert found.tree is None and any("ibnetdiscover is not on PATH" in t for t in found.tried)
    hosts = [f"h{i}" for i in range(49)]  # past the 48 whose every pair quick measures without a topology
    rec = tree.record(found, hosts, {}, seed=5)
    assert rec["source"] is None and rec["uplinks_covered"] is False
    assert rec["ring"] == "shuffled (seed 5), not the hostfile's: no leaf switches known"
    assert "do not knowingly cross leaf switches: uplinks not covered" in rec["why"]
    lines = tree.lines(found, hosts, {}, seed=5)
    assert any("uplinks not covered" in x and "shuffled (seed 5)" in x for x in lines), lines
    few = tree.record(found, ["a", "b", "c", "d"], {}, seed=5)
    assert few["ring"] == "every pair: no order to choose" and few["uplinks_covered"] is False


def test_a_validate_record_with_its_topology_matches_the_schema():
    base = {"schema_version": 1, "kind": "validate", "status": "ok", "time": "t", "run_id": "r", "result": "PASS",
            "level": "quick", "hosts": ["node1", "node2", "node3"], "checks": []}
    for found in (tree.Found(topology.read(str(FIX / "ibnetdiscover_ibm-two-hosts-one-switch.txt"))),
                  tree.Found(None, ("scontrol show topology: not inside a Slurm allocation",))):
        rec = {**base, "topology": tree.record(found, base["hosts"], {}, seed=1)}
        results.validate(json.loads(json.dumps(rec)))


# --------------------------------------------------------------------------- the ring without a topology
def test_a_hostfile_in_leaf_order_no_longer_keeps_the_ring_inside_the_leaves():
    """1,000 hosts written leaf by leaf, 32 a leaf (bench is not told the leaves): in hostfile order 968 of the
    ring's 1,000 pairs would stay inside a leaf; in the seeded shuffle about 1 in 32 does."""
    n, leaf = 1000, [i // 32 for i in range(1000)]

    def inside(rounds) -> int:
        return sum(leaf[a] == leaf[b] for r in rounds for a, b in r)

    assert inside(pairing.ring_rounds(n)) == 968, "the hostfile's order"
    got = pairing.first_rounds("ring", n, seed=1)
    assert len({frozenset(p) for r in got for p in r}) == n, "still the ring: every node with two neighbours"
    assert inside(got) < 0.06 * n, inside(got)
    assert got == pairing.first_rounds("ring", n, seed=1) != pairing.first_rounds("ring", n, seed=2)
    print(f"ring pairs inside a leaf: hostfile order {inside(pairing.ring_rounds(n))} of {n}, "
          f"shuffled (seed 1) {inside(got)} of {n}")


# --------------------------------------------------------------------------- the plan (--dry-run)
def test_the_plan_names_the_hosts_the_topology_does_not_place(tmp_path):
    (tmp_path / "hf").write_text("".join(f"node{i} slots=1\n" for i in range(1, 6)))
    got = cli("validate", "--hostfile", str(tmp_path / "hf"), "--dry-run", "--topology",
              str(CONF / "ok_suite.conf"), "--out", str(tmp_path / "out"))
    assert got.returncode == 0, got.stderr
    assert any("does not place node4, node5" in line for line in got.stdout.splitlines()), got.stdout
    none = cli("validate", "--hostfile", str(tmp_path / "hf"), "--dry-run", "--json", "--out", str(tmp_path / "o"),
               env={**os.environ, "PATH": "/nonexistent"})
    plan = json.loads(none.stdout)
    # five hosts without a topology: quick measures every pair (bench.validate.pair_kind), no ring order to choose
    assert plan["topology"]["uplinks_covered"] is False and plan["topology"]["ring"].startswith("every pair")
    assert any("uplinks not covered" in x for x in plan["topology_lines"])


# --------------------------------------------------------------------------- ibnetdiscover run here
def _stand_in(tmp_path: Path, script: str) -> dict[str, str]:
    """An `ibnetdiscover` first on PATH (no HCA here): what the real one prints, from a recorded output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ibnetdiscover").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "ibnetdiscover").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}


@pytest.mark.process
def test_outside_slurm_ibnetdiscover_run_here_gives_the_tree_and_its_failure_is_said(tmp_path):
    env = _stand_in(tmp_path, f"exec cat {FIX / 'ibnetdiscover_nvidia-ibdiagpath-two-switches.txt'}")
    env.pop("SLURM_JOB_ID", None)
    found = tree.find(ValidateConfig(level="quick"), nodes=5, environ=env)
    assert found.tree is not None and found.tree.source == "ibnetdiscover (run on this node)"
    assert found.tree.leaf_of["r-ufm111"] == "S-e41d2d030003e470"
    assert found.tried == ("scontrol show topology: not inside a Slurm allocation",)
    # Where it cannot reach the fabric it says so and exits -1 (iberror()): what a user saw, recorded.
    failed = FIX / "ibnetdiscover-failed_no-mad-port_infiniband-exporter-26.txt"
    env = _stand_in(tmp_path / "x", f"cat {failed} >&2\nexit 255")
    found = tree.find(ValidateConfig(level="quick"), nodes=5, environ=env)
    assert found.tree is None and any("exit 255: ibnetdiscover: iberror: failed: discover failed" in t
                                      for t in found.tried), found
    # A validate that measures no pair of nodes sweeps no fabric (a prolog runs on every node of every job).
    assert tree.find(ValidateConfig(level="quick", checks=("throughput",)), nodes=5, environ=env).tried == (
        "no pair of nodes to measure: no topology looked for",)
