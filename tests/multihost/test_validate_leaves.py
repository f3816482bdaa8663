"""validate names a slow leaf switch instead of draining its nodes (issue 45, must-show 2), on namespace hosts in three
leaves (tests/multihost/leaves.py: a bridge each, joined to the spine bridge by one veth, its uplink).

Six hosts, two per leaf, a topology.conf that says so, one CPU rank each, `--checks inter-node` at quick: each node
with its two ring neighbours across leaves and its leaf mate inside: the only check that sees a switch. The full quick
level's throughput and training launches took one healthy run to 108 s here (its inter-node stage: 24 s), past this
file's budget for both. The healthy fabric first, then leaf1's one uplink held to 200 Mbit/s both ways by a token
bucket (two pairs cross it at once: a few percent of a healthy pair's busbw here). Both runs share one cluster.
"""

from __future__ import annotations

import pytest

from bench.core import results

from .leaves import leaves
from .validate_runs import not_pass, row, run_validate, said

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

ASKED = ("preflight", "inventory", "inter-node", "fabric")
SLOW = "leaf1"


@pytest.fixture(scope="module")
def fabric(cluster_factory):
    with leaves(cluster_factory(6), 3) as fab:
        yield fab


def _validate(fab, tmp_path):
    v = run_validate(fab.cluster, tmp_path, "--checks", "inter-node", "--topology", str(fab.topology),
                     "--drain-file", str(tmp_path / "drain.txt"), slots=1)
    assert v.rec is not None, v.proc.stderr[-3000:]
    results.validate(v.rec)
    return v


def _skipped(rec: dict) -> tuple[str, ...]:
    """The checks this file did not ask for: their rows SKIP."""
    return tuple({c["check"] for c in rec["checks"]} - set(ASKED))


def _measured_across_and_inside(fab, rec: dict) -> None:
    """The topology was read: every leaf's own pair was measured, and ring pairs across leaves."""
    pairs = [c for c in rec["checks"] if c["check"] == "inter-node" and "+" in c["node"]]
    inside = {c["node"] for c in pairs if "across leaf switches" not in c["reason"]}
    mates = {frozenset(fab.hosts_of(leaf)) for leaf in fab.bridges}
    assert {frozenset(p.split("+")) for p in inside} == mates, said(pairs)
    assert len(pairs) > len(inside), said(pairs)
    assert rec["pairing"]["leaves"] == 3


def test_healthy_leaves_pass_and_drain_nothing(fabric, tmp_path):
    v = _validate(fabric, tmp_path)
    rec = v.rec
    # Exit 0, not every row PASS: on two shared cores one look of a healthy pair now and then falls past its line (a
    # node WARNs "intermittent" and is not drained); benchmarks/healthy_validates.py counts those (issue 45 item 6).
    assert v.proc.returncode == 0, said(not_pass(rec, *_skipped(rec)))
    assert rec["drain"] == [] and (tmp_path / "drain.txt").read_text() == ""
    _measured_across_and_inside(fabric, rec)
    leaf_rows = [c for c in rec["checks"] if c["check"] == "fabric"]
    assert {c["node"]: c["status"] for c in leaf_rows} == {"leaf1": "PASS", "leaf2": "PASS", "leaf3": "PASS",
                                                           "cluster": "PASS"}, said(leaf_rows)


def test_a_leaf_with_a_slow_uplink_is_named_and_its_nodes_held_not_drained(fabric, tmp_path):
    with fabric.slow(SLOW, "200mbit"):
        assert all("tbf" in q and "200Mbit" in q for q in fabric.qdiscs(SLOW)), fabric.qdiscs(SLOW)
        v = _validate(fabric, tmp_path)
    assert not any("tbf" in q for q in fabric.qdiscs(SLOW))  # the limit is gone, whatever runs next
    rec = v.rec
    named = row(rec, "fabric", SLOW)
    assert named["status"] in ("WARN", "FAIL"), said([named])
    assert f"switch {SLOW}'s uplinks" in named["action"], said([named])
    for leaf in ("leaf2", "leaf3"):
        assert row(rec, "fabric", leaf)["status"] == "PASS", said([row(rec, "fabric", leaf)])
    # The leaf's nodes are held: a WARN row each that names the switch; none is drained.
    mine = fabric.hosts_of(SLOW)
    held = [c for c in rec["checks"] if c["check"] == "fabric" and c["host"] is not None]
    assert {c["host"] for c in held} == set(mine), said(held)
    assert all(c["status"] == "WARN" and c["reason"].startswith(f"held: on leaf switch {SLOW}") for c in held), \
        said(held)
    assert rec["drain"] == [] and (tmp_path / "drain.txt").read_text() == "", said(not_pass(rec, *_skipped(rec)))
    assert v.proc.returncode == (1 if named["status"] == "FAIL" else 0), said(not_pass(rec, *_skipped(rec)))
    _measured_across_and_inside(fabric, rec)


def test_one_host_slow_across_its_leafs_uplink_only_is_held_with_its_uplink_named(fabric, tmp_path):
    """Issue 53: one host of leaf1 whose traffic across the uplink is held to 200 Mbit/s (an htb class for its
    address on the uplink's veth pair) while its pair inside leaf1 is not: its short looks are across leaves only, so
    it is held with the uplink it routes through named, not drained, and its leaf mate is neither."""
    host, mate = fabric.hosts_of(SLOW)
    with fabric.slow_host(host, "200mbit"):
        assert all("htb" in q for q in fabric.qdiscs(SLOW)), fabric.qdiscs(SLOW)
        v = _validate(fabric, tmp_path)
    assert not any("htb" in q for q in fabric.qdiscs(SLOW))
    rec = v.rec
    named = row(rec, "fabric", SLOW)
    assert named["status"] in ("WARN", "FAIL") and "1 of its 2 nodes" in named["reason"], said([named])
    assert named["action"].startswith(f"check the uplink(s) of switch {SLOW}"), said([named])
    held = [c for c in rec["checks"] if c["check"] == "fabric" and c["host"] is not None]
    assert {c["host"] for c in held} == {host}, said(held)
    assert rec["drain"] == [] and rec["nodes"][mate]["verdict"] == "healthy", said(not_pass(rec, *_skipped(rec)))
