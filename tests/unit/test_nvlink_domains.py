"""NVLink domains across nodes: 18 GB200 trays x 4 GPUs in one NVL72 domain plus 2 other domains, each node's saved
report built from the recorded gpud fabric state of a real GB200 tray (tests/fixtures/fabric, SOURCES.md: 4 GPUs,
clique 4026, ClusterUUID 9c6f5af3-..., Completed/Success).

Built from that recording, as no recording of a whole rack exists: the same 4 GPUs per tray; domain B takes the
ClusterUUID and clique of the other recorded GB200 (dc6e40c4-..., clique 2), domain C the first's ClusterUUID with
clique 4027 (another partition of the rack); one tray's GPU 2 "In Progress" in place of "Completed", one tray's
GPUs the other recording's ClusterUUID, one tray's GPU 3 that ClusterUUID alone.
"""

from __future__ import annotations

from pathlib import Path

from bench.cluster import nvlink_domains as domains
from bench.cluster.health.saved import from_dir
from bench.jobs.plan import HostSelection
from bench.render.html import validate_view
from bench.validate import budget, health, stages, tree
from bench.validate.config import ValidateConfig
from bench.validate.state import Validation
from bench.validate.verdicts import node_verdicts
from bench.analysis import references

FABRIC = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"
RECORDED = (FABRIC / "gpud-state_gb200_nvml-fabric-info_clique4026_cluster-uuid_excerpt.json.txt").read_text()
A_UUID, B_UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3", "dc6e40c4-d722-4357-9ba6-5291dd461278"
GPU2 = "GPU-7266bf77-cb00-bbcf-dec7-14edeb727426"   # the recording's third GPU
GPU3 = "GPU-e125bdab-f0ab-4786-0612-600bda0bd843"


def _gpu(text: str, uuid: str, old: str, new: str) -> str:
    """One GPU's object of the recorded JSON (escaped inside its data string) with `old` replaced by `new`."""
    start = text.index(f'{{\\"gpu_uuid\\":\\"{uuid}\\"')
    end = text.index("}}", start) + 2
    return text[:start] + text[start:end].replace(old, new) + text[end:]


def _rack(tmp_path: Path) -> dict[str, dict]:
    nodes = {f"tray{i:02d}": RECORDED for i in range(1, 19)}
    nodes["tray05"] = _gpu(RECORDED, GPU2, '\\"state\\":\\"Completed\\"', '\\"state\\":\\"In Progress\\"')
    nodes["tray11"] = RECORDED.replace(A_UUID, B_UUID)
    nodes["tray14"] = _gpu(RECORDED, GPU3, A_UUID, B_UUID)
    nodes |= {f"b{i}": RECORDED.replace(A_UUID, B_UUID).replace(":4026,", ":2,") for i in range(1, 5)}
    nodes |= {f"c{i}": RECORDED.replace(":4026,", ":4027,") for i in range(1, 5)}
    reports = {}
    for host, text in nodes.items():
        (tmp_path / host).mkdir()
        (tmp_path / host / "gpud-fabric.txt").write_text(text)
        reports[host] = from_dir(str(tmp_path / host))
    return reports


def test_an_nvl72_rack_and_two_other_domains(tmp_path):
    reports = _rack(tmp_path)
    assert len(reports) == 26 and all(len(r["fabric"]) == 4 for r in reports.values())
    cfg = ValidateConfig(level="health", out=str(tmp_path / "out"))
    resources = {h: [0, 1, 2, 3] for h in reports}
    v = Validation(cfg, HostSelection(), resources, references.load(None), str(tmp_path / "out" / "v"), launcher="local")
    v.health_reports = reports
    health.health(v)
    nodes = node_verdicts(v.checks, v.resources)
    # The tray whose GPU 2 is still In Progress is drained alone, for its fabric state, with its action.
    assert [h for h, n in nodes.items() if n["verdict"] == "drain"] == ["tray05", "tray14"]
    (row,) = [c for c in v.checks if c.node == "tray05:2"]
    assert row.status == "FAIL" and "fabric-not-ready" in row.value and "In Progress" in row.value
    assert row.action == "check-fabric" and "CliqueId 4026" in row.reason
    # A tray whose GPUs disagree (GPU 3 names another ClusterUUID) is named and drained; one whose GPUs all name
    # another ClusterUUID is named, kept (it trains over its NICs) and degraded.
    (split,) = [c for c in v.checks if c.node == "tray14"]
    assert "nvlink-domain-split" in split.value and f"GPU 3: {B_UUID}/4026" in split.value
    assert nodes["tray11"]["verdict"] == "degraded"
    (alone,) = [c for c in v.checks if c.node == "tray11"]
    assert "nvlink-domain-alone" in alone.value and B_UUID in alone.value and f"{A_UUID}/4026" in alone.value
    # Three domains: the rack's 16 other trays (tray05 among them: its fault is its own), B and C.
    rec = v.figures["nvlink_domains"]
    assert {k: len(hosts) for k, hosts in rec["domains"].items()} == {f"{A_UUID}/4026": 16, f"{B_UUID}/2": 4,
                                                                       f"{A_UUID}/4027": 4}
    assert set(rec["split"]) == {"tray14"} and set(rec["alone"]) == {"tray11"}
    # The plan pairs by them: each domain a leaf of its own, pairs inside it over NVLink, across them the NICs.
    plan = budget.plan(ValidateConfig(level="full", out=str(tmp_path / "out")), resources, "pdsh",
                       references.load(None), found=tree.Found(v.tree))
    leaves = plan["topology"]["leaf_of"]
    assert sorted(set(leaves.values())) == sorted(domains.PREFIX + k for k in rec["domains"])
    assert set(reports) - set(leaves) == {"tray11", "tray14"} and "NVLink domains (3)" in plan["topology"]["source"]
    inter = next(s for s in plan["stages"] if s.get("pairs"))
    assert "pairs across leaf switches" in inter["pairing"]
    # The record's topology is the same tree: report.html's grid groups the nodes by their domain.
    rec = stages.record(v, "validate-domains", 1.0)
    view = validate_view.validate_view(rec)
    assert {g["name"]: len(g["cells"]) for g in view["groups"]} == {
        f"nvlink:{A_UUID}/4026": 16, "no leaf given": 2, f"nvlink:{B_UUID}/2": 4, f"nvlink:{A_UUID}/4027": 4}
    assert view["grouped_by"] == "NVLink domain"


def test_a_single_node_nvswitch_system_and_nodes_without_fabric_are_in_no_domain():
    # The recorded HGX H100 (clique 0, no ClusterUUID) and the TITAN V (N/A): no domain, no finding.
    single = [{"gpu_index": 0, "clique_id": 0, "cluster_uuid": None, "state": "Completed"}] * 8
    na = [{"gpu_index": 0, "clique_id": None, "cluster_uuid": None, "state": None}]
    d = domains.group({"hgx1": single, "hgx2": single, "titan": na, "cpu": []})
    assert (d.domains, d.split, d.alone, d.findings()) == ({}, {}, {}, {})
