"""The plan at 1,000 nodes x 8 GPUs (bench.validate.budget, what `bench validate --dry-run` prints), over pdsh with
DCGM at the level's default, without a topology and with 32 leaf switches: quick under 10 minutes and full under
30 (issue 53's Must-show), and what the pair rounds cost in it (docs/validate.md, "What the looks cost"). In-process:
the plan reaches no node."""

from __future__ import annotations

import pytest

from bench.analysis import references
from bench.cluster import topology
from bench.validate import budget, tree
from bench.validate.config import LEVELS, ValidateConfig

NODES, GPUS = 1000, 8
UNDER_S = {"quick": 600, "full": 1800}


@pytest.fixture(scope="module")
def topology_conf(tmp_path_factory):
    path = tmp_path_factory.mktemp("fabric") / "topology.conf"
    lines = [f"SwitchName=leaf{k:02d} Nodes=node[{32 * k:04d}-{min(32 * k + 31, NODES - 1):04d}]"
             for k in range((NODES + 31) // 32)]
    path.write_text("\n".join(lines + ["SwitchName=spine0 Switches=leaf[00-31]"]) + "\n")
    return str(path)


def _plan(level: str, conf: str | None) -> dict:
    cfg = ValidateConfig(level=level, topology=conf)
    found = tree.Found(topology.read(conf) if conf else None)
    return budget.plan(cfg, {f"node{i:04d}": list(range(GPUS)) for i in range(NODES)}, "pdsh", references.load(),
                       found)


@pytest.mark.parametrize("with_topology", [False, True], ids=["no topology", "32 leaves"])
@pytest.mark.parametrize("level", ["quick", "full"])
def test_the_plan_at_1000_nodes_is_within_the_levels_time(level, with_topology, topology_conf):
    p = _plan(level, topology_conf if with_topology else None)
    assert p["predicted_s"] < UNDER_S[level], (level, with_topology, p["predicted_s"])
    links = next(s for s in p["stages"] if s["stage"] == "intra-node")
    lv = LEVELS[level]
    # The first launch: each node's own all-reduce, the pair rounds over their passes, the whole set.
    rounds = links["rounds"] - 2
    ring_and_matchings = 2 + (lv.matchings if lv.pairs == "all" else 0)  # an even ring is 2 rounds
    if with_topology and lv.across_looks is not None and lv.across_looks < lv.pair_looks:
        # the pairs across leaves in across_looks passes, each leaf's own ring (2 rounds at 32 nodes) in every pass
        assert rounds == ring_and_matchings * lv.across_looks + 2 * lv.pair_looks
    else:
        assert rounds == (ring_and_matchings + 2 * with_topology) * lv.pair_looks


@pytest.mark.parametrize("text, ratio", [("2", 2.0), ("2:1", 2.0), ("1", 1.0), ("1.5:1", 1.5)])
def test_the_fabric_design_is_read_as_its_ratio(text, ratio):
    from bench.validate.config import _ratio

    assert _ratio(text) == ratio


def test_an_oversubscription_below_one_is_one_line_and_exit_2(tmp_path):
    from tests.conftest import cli

    hosts = tmp_path / "hosts"
    hosts.write_text("node0000 slots=8\nnode0001 slots=8\n")
    proc = cli("validate", "--hostfile", str(hosts), "--dry-run", "--oversubscription", "0.5")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("'0.5' is not an oversubscription (R or R:1, R from 1: e.g. "
                                                         "2 or 2:1)")


@pytest.mark.parametrize("with_topology", [False, True], ids=["no topology", "32 leaves"])
def test_the_second_look_is_costed_by_its_own_rounds(with_topology, topology_conf):
    """At its largest the inter-node second look is a node in doubt's every pair and two good partners, again_looks
    times each (full: 6 partners, 8 with each leaf's own ring, + 2, x 4): its own launch in the budget, not 0 s."""
    p = _plan("full", topology_conf if with_topology else None)
    inter = next(s for s in p["stages"] if s["stage"] == "inter-node")
    lv = LEVELS["full"]
    assert inter["again_rounds"] == (6 + 2 * with_topology + 2) * lv.again_looks
    # the launch's start (the head's ssh 60 s, a rank's 12 s, 8,000 ranks' rendezvous) and a round of pairs at the
    # slowest NIC, 100G: 28 all-reduces of 343 MB, 1.48 s (docs/validate.md, "What the looks cost")
    assert inter["again_s"] == pytest.approx(60 + 12 + 8.4 + 1.48 * inter["again_rounds"], abs=1)
    assert p["second_looks"]["predicted_s"] >= inter["again_s"]


@pytest.mark.parametrize("nodes", [17, 48])
def test_quick_s_every_pair_of_a_small_cluster_stays_within_its_time(nodes):
    """Without a topology quick measures every pair up to 48 nodes (bench.validate.pair_kind): N-1 rounds (N for odd
    N) where the ring took 2-3, and the second look at its largest a node's every partner and two good ones; the
    plan stays under quick's 10 minutes (17 x 8: 208 s, 48 x 8: 265 s, where the ring's plan was 188 s and 198 s)."""
    cfg = ValidateConfig(level="quick")
    p = budget.plan(cfg, {f"node{i:04d}": list(range(GPUS)) for i in range(nodes)}, "pdsh", references.load(),
                    tree.Found(None))
    assert p["predicted_s"] < UNDER_S["quick"], p["predicted_s"]
    links = next(s for s in p["stages"] if s["stage"] == "intra-node")
    assert links["rounds"] - 2 == nodes - 1 + nodes % 2
    inter = next(s for s in p["stages"] if s["stage"] == "inter-node")
    assert inter["again_rounds"] == nodes - 1 + 2 and inter["pairing"].startswith("every pair")
