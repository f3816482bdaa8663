"""bench validate at 1,000 nodes x 8 GPUs through the path after the ranks, in counts (never times): every launch
answered in-process by tests/scale_fixtures.py, one node in a hundred bad (benchmarks/validate_scale.py times the
same path). And the parts made fast for it give what the slow ones gave."""

from __future__ import annotations

import collections
import math
import random
import xml.etree.ElementTree as ET

import pytest

from tests import scale_fixtures


def _validate(tmp_path, nodes: int, level: str, bad: dict[str, str] | None = None):
    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = scale_fixtures.Cluster(nodes)
    if bad is not None:
        cluster.bad = bad
    cfg = ValidateConfig(level=level, out=str(tmp_path / "results"), drain_file=str(tmp_path / "drain.txt"))
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        rec = stages.validate(cfg, HostSelection(hostfile=cluster.hostfile(str(tmp_path))))
    return cluster, rec


@pytest.fixture(scope="module")
def thousand(tmp_path_factory):
    """One quick validate of 1,000 nodes (8,000 GPUs), shared by the tests below: a few seconds."""
    tmp = tmp_path_factory.mktemp("thousand")
    cluster, rec = _validate(tmp, 1000, "quick")
    return cluster, rec, tmp


def _rows(rec) -> collections.Counter:
    """(check, what the row is about, status) -> rows."""
    def about(c) -> str:
        return "gpu" if c["gpu"] is not None else "pair" if "+" in c["node"] else \
            "cluster" if c["node"] == "cluster" else "node"
    return collections.Counter((c["check"], about(c), c["status"]) for c in rec["checks"])


def test_the_planted_faults_are_one_node_in_a_hundred_of_each_kind_in_turn(thousand):
    cluster, _, _ = thousand
    kinds = collections.Counter(cluster.bad.values())
    assert kinds == {"slow-gpu": 3, "slow-nic": 3, "numerics": 2, "health": 2}
    assert sorted(cluster.bad) == [f"node{i:04d}" for i in range(7, 1000, 100)]


def test_every_check_has_a_row_per_gpu_node_and_pair_it_covers(thousand):
    _, rec, _ = thousand
    got = _rows(rec)
    out = 2 * 8                       # the two nodes DCGM fails on every GPU: left out after health
    assert sum(n for (c, a, _), n in got.items() if (c, a) == ("health", "gpu")) == 8000
    assert got["health", "gpu", "FAIL"] == out and got["health", "node", "PASS"] == 1000
    for check in ("throughput", "numerics"):
        assert sum(n for (c, a, _), n in got.items() if (c, a) == (check, "gpu")) == 8000 - out, check
        assert sum(n for (c, a, _), n in got.items() if (c, a) == (check, "node")) == 1000, check
        assert got[check, "node", "SKIP"] == 2, check
    assert got["throughput", "gpu", "FAIL"] == 3 and got["numerics", "gpu", "SKIP"] == 3  # the slow GPUs, out
    assert got["numerics", "gpu", "FAIL"] == 2
    assert got["matmul", "gpu", "PASS"] == 8000 - out - 3
    # A GPU left out has a matmul row too (it rides numerics' job): the three slow ones, and the two nodes out.
    assert got["matmul", "gpu", "SKIP"] == 3 and got["matmul", "node", "SKIP"] == 2
    assert got["intra-node", "node", "PASS"] + got["intra-node", "node", "SKIP"] == 1000
    # The ring of the 998 nodes still in, each slow NIC's bisection against two nodes found good, and (no topology)
    # the suspects, the three blamed and their six ring partners, in a ring of their own (9 pairs, less any measured
    # already): a slow NIC is slow with the other suspects too, so each is its own NIC, not a path they share.
    assert 998 + 3 * 2 < got["inter-node", "pair", "PASS"] + got["inter-node", "pair", "FAIL"] <= 998 + 3 * 2 + 9
    assert got["inter-node", "node", "FAIL"] == 3 and got["inter-node", "node", "SKIP"] == 2
    for check in ("heterogeneity", "training", "stragglers", "scaling"):
        assert sum(n for (c, a, _), n in got.items() if (c, a) == (check, "cluster")) == 1, check
    assert rec["counts"] == {s: sum(n for (_, _, st), n in got.items() if st == s)
                             for s in ("FAIL", "ERROR", "WARN", "PASS", "SKIP")}


def test_one_verdict_per_node_and_the_drain_names_exactly_the_planted_nodes(thousand):
    cluster, rec, tmp = thousand
    assert list(rec["nodes"]) == cluster.hosts
    verdicts = collections.Counter(n["verdict"] for n in rec["nodes"].values())
    assert verdicts == {"healthy": 990, "drain": 10}
    assert {h for h, n in rec["nodes"].items() if n["verdict"] == "drain"} == set(cluster.bad)
    assert {(e["host"], e["gpu"], e["check"]) for e in rec["drain"]} == scale_fixtures.expected_drain(cluster.bad)
    assert sorted((tmp / "drain.txt").read_text().split()) == sorted(cluster.bad)
    assert rec["exit_status"] == 1 and rec["held"] is None, "10 of 1,000 is within --max-drain's 10%"
    assert cluster.launches == ["throughput", "throughput-repeat", "links", "inter-node-again", "training"]


def test_the_record_the_metrics_file_and_junit_hold_every_row_and_node(thousand):
    from bench.core import results
    from bench.render import junit, metrics_file

    _, rec, _ = thousand
    results.validate(rec)
    prom = metrics_file.text(rec).splitlines()
    assert sum(line.startswith("vitbench_node_verdict{") for line in prom) == 1000
    assert sum(line.startswith("vitbench_gpu_images_per_second{") for line in prom) == 8000 - 16
    assert sum(line.startswith("vitbench_validate_check{") for line in prom) == \
        sum(c["status"] != "SKIP" for c in rec["checks"])
    suite = ET.fromstring(junit.to_junit(rec["checks"]).split("\n", 1)[1])[0]
    assert len(suite) == len(rec["checks"]) and suite.get("failures") == str(rec["counts"]["FAIL"])


def test_each_kind_of_fault_at_the_full_level_is_drained_by_its_own_check(tmp_path):
    bad = {"node0007": "slow-gpu", "node0027": "slow-nic", "node0047": "numerics", "node0067": "health"}
    cluster, rec = _validate(tmp_path, 100, "full", bad)
    assert {(e["host"], e["gpu"], e["check"]) for e in rec["drain"]} == scale_fixtures.expected_drain(bad)
    assert [h for h, n in rec["nodes"].items() if n["verdict"] != "healthy"] == sorted(bad)
    assert rec["pairing"]["rounds"] == 6, "the ring and 4 random matchings past 16 nodes"


# --------------------------------------------------------------------------- the fast parts give the same
@pytest.mark.parametrize("pools, length", [(8, 20), (300, 40), (400, 7), (64, 1), (3, 64), (200, 65)])
def test_expected_slowest_is_the_python_loops_figure_bit_for_bit(pools, length):
    from bench.analysis import metrics

    rng = random.Random(pools * length)
    samples = [[rng.uniform(0.05, 0.2) for _ in range(length)] for _ in range(pools)]
    loop = random.Random(0)
    want = math.fsum(max(loop.choice(p) for p in samples) for _ in range(4000)) / 4000
    assert metrics.expected_slowest(samples) == want


def test_pools_of_other_lengths_take_the_loop_and_the_same_figure():
    from bench.analysis import metrics

    samples = [[0.1, 0.2, 0.3], [0.15, 0.25], [0.12] * 7] * 20
    loop = random.Random(3)
    assert metrics.expected_slowest(samples, 500, 3) == \
        math.fsum(max(loop.choice(p) for p in samples) for _ in range(500)) / 500


def test_a_ranks_peers_are_the_tuple_of_the_others():
    from bench.analysis.numerics import Others

    names = ("a:0", "a:1", "b:0", "b:1")
    for i, me in enumerate(names):
        want = tuple(k for k in names if k != me)
        got = Others(names, i)
        assert got == want and want == got and hash(got) == hash(want) and repr(got) == repr(want)
        assert len(got) == 3 and list(got) == list(want) and [got[j] for j in range(-3, 3)] == [want[j] for j in
                                                                                             range(-3, 3)]
        assert got[1:] == want[1:] and me not in got and got != want[:2]
        with pytest.raises(IndexError):
            got[3]


def test_comm_rows_from_a_summary_keep_their_order_and_figures():
    from bench.analysis.comm_figures import rows_from_summary

    # Three ranks, groups [0, 1], [1, 2] and all three; round 0 has group 0, round 1 groups 1 and 2 (rank 1's
    # entry for group 1 names no round: its group index stands for it, as older ranks wrote it).
    def rows(t):
        return [{"size": 1024, "times_s": [t, t], "wrong": 0, "back_to_back": 1}]
    summary = {"groups": [[0, 1], [1, 2], [0, 1, 2]], "rounds": [[0], [1, 2]], "ranks": [
        {"groups": [{"group": 0, "round": 0, "rows": rows(1e-3)}, {"group": 2, "round": 1, "rows": rows(4e-3)}]},
        {"groups": [{"group": 0, "round": 0, "rows": rows(2e-3)}, {"group": 1, "rows": rows(3e-3)}]},
        {"groups": [{"group": 1, "round": 1, "rows": rows(5e-3)}, {"group": 2, "round": 1, "rows": rows(6e-3)}]}]}
    got = rows_from_summary(summary, "all_reduce", ["p0", "p1", "all"])
    assert [(r["group"], r["round"], r["ranks"], r["time_s"]["median"]) for r in got] == [
        ("p0", 0, 2, 2e-3), ("p1", 1, 2, 5e-3), ("all", 1, 3, 6e-3)]


def test_copies_and_memory_have_a_row_per_gpu_still_in_and_the_burn_is_off_at_quick(thousand):
    _, rec, _ = thousand
    got = _rows(rec)
    out, slow = 2 * 8, 3 + 2     # the health nodes; the slow GPUs and the wrong ones, left out before the copies
    for check in ("copies", "memory"):
        assert got[check, "gpu", "PASS"] == 8000 - out - slow, check
        assert got[check, "gpu", "SKIP"] == slow and got[check, "node", "SKIP"] == 2, check
    assert got["binding", "gpu", "WARN"] == 0
    assert got["burn", "node", "SKIP"] == 1000 and not any(c == "burn" and a == "gpu" for c, a, _ in got)
    row = next(c for c in rec["checks"] if c["check"] == "copies" and c["status"] == "PASS")
    assert "PCIe gen5 x16 H2D" in row["reference"] and "GB/s alone; all at once" in row["value"]


def test_the_page_of_1000_nodes_has_a_cell_per_node_and_every_row_of_each_node(thousand, tmp_path):
    """report.html (bench.render.html): one grid cell per node, coloured by its verdict, and the data its cells open
    holds every row about that node (its own, its GPUs', its pairs') of every check, none lost or added. Its size and
    how long it takes to write and show are benchmarks/report_html.py's."""
    import re

    from bench.render.html.node_data import COLS, hosts_of_row
    from bench.render.html.page import unpack
    from bench.render.html.report import write

    cluster, rec, _ = thousand
    path = tmp_path / "report.html"
    write(str(path), [(rec, None)], [])
    text = path.read_text()
    cells = re.findall(r'<a class="cell s-(\w+)" href="#v0-node-([^"]+)" data-host="([^"]+)" data-verdict="(\w+)"',
                        text)
    assert [host for _, _, host, _ in cells] == cluster.hosts
    assert {h: (v, s) for s, _, h, v in cells} == {
        h: (n["verdict"], {"healthy": "PASS", "degraded": "WARN", "drain": "FAIL", "unknown": "ERROR"}[n["verdict"]])
        for h, n in rec["nodes"].items()}
    assert {h for s, _, h, _ in cells if s == "FAIL"} == set(cluster.bad)
    data = unpack(re.search(r'<script type="application/octet-stream" id="v0-data">(.*?)</script>', text, re.S)[1])
    assert data["cols"] == list(COLS)
    s = data["s"]
    got = collections.Counter((h, s[r[0]], s[r[1]], s[r[2]], s[r[5]]) for h, n in data["nodes"].items()
                              for r in (data["rows"][i] for i in n["rows"]))
    want = collections.Counter((h, c["check"], c["node"], c["status"], c["reason"]) for c in rec["checks"]
                               for h in hosts_of_row(c, set(rec["hosts"])))
    assert got == want
    # A row per check per node: each check that reaches every node (a GPU's row, a pair's or the node's own; matmul
    # has none for the two nodes health left out) is in every node's panel.
    for check in ("preflight", "inventory", "health", "throughput", "numerics", "copies", "memory", "intra-node",
                  "inter-node", "burn"):
        assert {h for (h, c, _, _, _) in got if c == check} == set(cluster.hosts), check
    assert sum(got.values()) > len([c for c in rec["checks"] if c["node"] != "cluster"])  # a pair's row under both
