"""Each GPU's NVLink fabric state from the recorded outputs (tests/fixtures/fabric, sources in its SOURCES.md), and
`bench validate --health-from` on each: Completed/Success healthy, each bad state, status and health bit a finding
with its action, a single-node NVSwitch system (clique 0, no ClusterUUID, no IMEX) healthy.

Every file is a real capture except where SOURCES.md says it was cut (grep excerpts, gpud's truncated JSON); no
real capture of a Degraded bandwidth, a route bit or an incorrect configuration exists, so those bits are tested
on the recorded Unhealthy block with its Health rows set as `nvidia-smi -q` documents them (Full/Degraded,
True/False, None or what is wrong), and said so there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.cluster.accel.nvidia import fabric_state
from tests.conftest import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FABRIC = FIXTURES / "fabric"

# (recording, saved as, exit status, verdict, the fabric findings' (code, severity, action)), one per recording.
RECORDED = [
    ("fabric/nvidia-smi-q-fabric_completed-insufficient-resources_clique0_zero-clusteruuid_reindented.txt",
     "nvidia-smi-q.txt", 1, "drain", [("fabric-not-ready", "fail", "check-fabric")]),
    ("fabric/nvidia-smi-q-fabric_gb200_health-unhealthy_clique2_grep-C3.txt", "nvidia-smi-q.txt", 1, "drain",
     [("fabric-unhealthy", "fail", "check-fabric")]),
    ("fabric/gpud-state_h100x8_fabric-completed_fm-not-active_truncated.json.txt", "gpud-fabric.txt", 1, "drain",
     [("fabric-manager-inactive", "fail", "check-fabric")]),
    # Healthy: a GB200 tray in clique 4026 (Completed, Success); N/A on a GPU without fabric (TITAN V) and on a
    # GB200 driver without the query (all-N/A block, gpud's "Not Supported" table): nothing to judge, not a fault.
    ("fabric/gpud-state_gb200_nvml-fabric-info_clique4026_cluster-uuid_excerpt.json.txt", "gpud-fabric.txt", 0,
     "healthy", []),
    ("fabric/nvidia-smi-q-fabric_gb200_all-na_health-fields_grep-A11.txt", "nvidia-smi-q.txt", 0, "healthy", []),
    ("fabric/gpud-scan_gb200_nvml-fabric-state-not-supported_table.txt", "gpud-fabric.txt", 0, "healthy", []),
    ("fabric/nvidia-smi-q_titan-v_560.35.03_fabric-all-na.txt", "nvidia-smi-q.txt", 0, "healthy", []),
    # Single-node NVSwitch HGX H100s without IMEX: every GPU Completed/Success, clique 0, no ClusterUUID (gpud after
    # the Fabric Manager's restart; two 535-driver `nvidia-smi -q` of tests/fixtures/health that print no clique).
    ("fabric/gpud-state_h100x8_nvml-fabric-info_clique0_no-cluster-uuid_truncated.json.txt", "gpud-fabric.txt", 0,
     "healthy", []),
    # (this one's findings are its power-brake throttling, none about the fabric: test_validate_health's)
    ("health/nvidia-smi-q_h100x8_hw-slowdown-power-brake-active.txt", "nvidia-smi-q.txt", 0, "degraded", []),
    # IMEX domains of 2 GH200 nodes and of one, both UP: healthy.
    ("fabric/nvidia-imex-ctl-N_gh200_2-node-domain_imex570.00_up.txt", "nvidia-imex-ctl.txt", 0, "healthy", []),
    ("fabric/nvidia-imex-ctl-N_gh200_1-node-domain_imex570.00_up.txt", "nvidia-imex-ctl.txt", 0, "healthy", []),
]


def _validate(tmp_path: Path, recording: str, name: str):
    node = tmp_path / "node7"
    node.mkdir()
    shutil.copyfile(FIXTURES / recording, node / name)
    got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "results"), "--json")
    return got, json.loads(got.stdout)


@pytest.mark.parametrize("recording,name,status,verdict,codes", RECORDED, ids=[r[0].split("/")[1] for r in RECORDED])
def test_health_from_each_recorded_fabric_output(tmp_path, recording, name, status, verdict, codes):
    got, rec = _validate(tmp_path, recording, name)
    assert got.returncode == status, got.stderr
    assert rec["nodes"]["node7"]["verdict"] == verdict
    report = rec["measured"]["health"]["node7"]
    assert [(f["code"], f["severity"], f["action"]) for f in report["findings"]
            if f["code"].startswith("fabric")] == codes
    if name == "nvidia-imex-ctl.txt":
        assert report["read"]["imex"].startswith("domain UP") and report["fabric"] == []
        return
    assert bool(report["fabric"]) == ("fm-not-active" not in recording)
    assert ("fabric" in report["read"]) == (any(g["state"] for g in report["fabric"]) or name == "gpud-fabric.txt")
    if status:
        row = next(c for c in rec["checks"] if c["check"] == "health" and c["status"] == "FAIL")
        assert codes[0][0] in row["value"] and row["action"] == "check-fabric"


def test_the_recorded_fields_are_read_from_each_layout():
    (gb,) = fabric_state.from_smi_q((FABRIC / "nvidia-smi-q-fabric_gb200_health-unhealthy_clique2_grep-C3.txt")
                                    .read_text())  # fmt: skip
    assert (gb.state, gb.status, gb.clique_id, gb.cluster_uuid, gb.summary, gb.health) == (
        "Completed", "Success", 2, "dc6e40c4-d722-4357-9ba6-5291dd461278", "Unhealthy", {"bandwidth": "Full"})
    # Re-indented by its author (Fabric at column 0): read by its own indent; the zero ClusterUUID is none.
    (az,) = fabric_state.from_smi_q((FABRIC / "nvidia-smi-q-fabric_completed-insufficient-resources_clique0_"
                                               "zero-clusteruuid_reindented.txt").read_text())  # fmt: skip
    assert (az.state, az.status, az.clique_id, az.cluster_uuid, az.in_domain()) == (
        "Completed", "Insufficient Resources", 0, None, False)
    gpus, about = fabric_state.from_gpud((FABRIC / "gpud-state_gb200_nvml-fabric-info_clique4026_cluster-uuid_"
                                                   "excerpt.json.txt").read_text())  # fmt: skip
    assert {(g.clique_id, g.cluster_uuid, g.state, g.status) for g in gpus} == {
        (4026, "9c6f5af3-53bf-49b5-a436-b66766c413c3", "Completed", "Success")} and len(gpus) == 4
    assert all(g.in_domain() for g in gpus) and about["health"] == "Healthy"
    # Cut by its author inside the second GPU's object: the first is read, the cut one is not made up.
    gpus, _ = fabric_state.from_gpud((FABRIC / "gpud-state_h100x8_nvml-fabric-info_clique0_no-cluster-uuid_"
                                               "truncated.json.txt").read_text())  # fmt: skip
    assert [(g.uuid, g.clique_id, g.cluster_uuid, g.in_domain()) for g in gpus] == [
        ("GPU-237607dc-9acc-a45b-8d64-cd9dea461c5b", 0, None, False)]
    titan = fabric_state.from_smi_q((FABRIC / "nvidia-smi-q_titan-v_560.35.03_fabric-all-na.txt").read_text())
    assert [(g.bus_id, g.state, g.clique_id) for g in titan] == [("00000000:01:00.0", None, None)]


# Not recorded: the recorded Unhealthy block with one Health row set to the documented fault value each.
@pytest.mark.parametrize("row,value,code,severity", [
    ("Bandwidth", "Degraded", "fabric-bandwidth-degraded", "warn"),
    ("Route Unhealthy", "True", "fabric-route-unhealthy", "fail"),
    ("Route Recovery in progress", "True", "fabric-route-recovery", "warn"),
    ("Access Timeout Recovery", "True", "fabric-access-timeout-recovery", "warn"),
    ("Incorrect Configuration", "Incorrect Chassis Sn", "fabric-incorrect-configuration", "fail"),
])
def test_each_health_bit_is_its_own_finding(row, value, code, severity):
    recorded = (FABRIC / "nvidia-smi-q-fabric_gb200_health-unhealthy_clique2_grep-C3.txt").read_text()
    line = "            Bandwidth                     : Full\n"
    assert line in recorded

    def block(v: str, summary: str) -> str:
        bit = f"            {row:30s}: {v}\n"
        return recorded.replace(line, bit if row == "Bandwidth" else line + bit).replace("Unhealthy", summary)

    found = fabric_state.findings(fabric_state.from_smi_q(block(value, "Unhealthy")), "nvidia-smi -q")
    assert [(f["code"], f["severity"]) for f in found] == [(code, severity)], found
    assert value in found[0]["what"] and "ClusterUUID dc6e40c4" in found[0]["what"]
    healthy = {"Bandwidth": "Full", "Incorrect Configuration": "None"}.get(row, "False")
    assert fabric_state.findings(fabric_state.from_smi_q(block(healthy, "Healthy")), "nvidia-smi -q") == []


def test_a_file_that_is_not_gpuds_fabric_state_is_refused_in_one_line(tmp_path):
    node = tmp_path / "node7"
    node.mkdir()
    (node / "gpud-fabric.txt").write_text("hello\n")
    got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "results"))
    assert got.returncode == 2 and "gpud-fabric.txt" in got.stderr and "Traceback" not in got.stderr


def test_imex_down_is_judged_only_on_a_node_in_a_multi_node_domain(tmp_path):
    # Not recorded (no IMEX failure output exists): the recorded 2-node table with node #1 UNAVAILABLE, its
    # cells N (never connected) and the domain DOWN, values from the output's own legend.
    up = (FABRIC / "nvidia-imex-ctl-N_gh200_2-node-domain_imex570.00_up.txt").read_text()
    down = (up.replace("10.136.206.48   - READY", "10.136.206.48   - UNAVAILABLE")
              .replace("       0        C  C", "       0        C  N").replace("       1        C  C", "       1        N  C")
              .replace("Domain State: UP", "Domain State: DOWN"))  # fmt: skip
    gb200 = (FABRIC / "gpud-state_gb200_nvml-fabric-info_clique4026_cluster-uuid_excerpt.json.txt").read_text()
    hgx = (FABRIC / "gpud-state_h100x8_nvml-fabric-info_clique0_no-cluster-uuid_truncated.json.txt").read_text()
    for fabric, codes in ((gb200, ["imex-domain-down", "imex-node-not-ready", "imex-not-connected"]), (hgx, [])):
        node = tmp_path / ("gb200" if fabric is gb200 else "hgx")
        node.mkdir()
        (node / "nvidia-imex-ctl.txt").write_text(down)
        (node / "gpud-fabric.txt").write_text(fabric)
        got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "results"), "--json")
        report = json.loads(got.stdout)["measured"]["health"][node.name]
        assert [f["code"] for f in report["findings"]] == codes and got.returncode == (1 if codes else 0)
        if not codes:   # the single-node NVSwitch system: the false IMEX failure users report, not made here
            assert "not judged: no GPU of this node is in a multi-node NVLink domain" in report["read"]["imex"]


def test_nvml_fabric_info_is_read_as_the_smi_q_section_is():
    # No GPU here: pynvml's own struct and constants (nvidia-ml-py is installed), its call stood in for, filled
    # with the values of the recorded GB200 block (Completed, Success, clique 2, its ClusterUUID) and one
    # documented fault bit each: the same findings as from `nvidia-smi -q`.
    import ctypes
    import uuid

    pynvml = pytest.importorskip("pynvml")
    from bench.cluster.accel.nvidia import fabric_nvml

    def stand_in(state, status, clique, cluster, mask):
        def fn(h, ref):
            info = ref._obj
            info.state, info.status, info.cliqueId, info.healthMask = state, status, clique, mask
            ctypes.memmove(info.clusterUuid, uuid.UUID(cluster).bytes, 16)
        return type("nv", (), {"c_nvmlGpuFabricInfoV_t": pynvml.c_nvmlGpuFabricInfoV_t,
                               "nvmlGpuFabricInfo_v2": pynvml.nvmlGpuFabricInfo_v2,
                               "nvmlDeviceGetGpuFabricInfoV": staticmethod(fn),
                               "nvmlErrorString": staticmethod(lambda s: "Insufficient Resources")})

    B = "dc6e40c4-d722-4357-9ba6-5291dd461278"
    full = (2 << 0) | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8)        # Full, False, False, False, None
    ok = fabric_nvml.read(stand_in(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0, 2, B, full), None, 0, None)
    assert (ok.state, ok.status, ok.clique_id, ok.cluster_uuid) == ("Completed", "Success", 2, B)
    assert ok.health == {"bandwidth": "Full", "route_recovery_in_progress": "False", "route_unhealthy": "False",
                         "access_timeout_recovery": "False", "incorrect_configuration": "None"}
    assert fabric_state.findings([ok], "nvml") == []
    degraded = fabric_nvml.read(stand_in(3, 0, 2, B, full & ~3 | 1), None, 0, None)
    route = fabric_nvml.read(stand_in(3, 0, 2, B, full & ~(3 << 4) | (1 << 4)), None, 1, None)
    short = fabric_nvml.read(stand_in(3, 23, 0, "00000000-0000-0000-0000-000000000000", full), None, 2, None)
    assert [f["code"] for f in fabric_state.findings([degraded, route, short], "nvml")] == [
        "fabric-bandwidth-degraded", "fabric-route-unhealthy", "fabric-not-ready"]
    assert short.cluster_uuid is None and short.status == "Insufficient Resources"
    assert fabric_nvml.read(stand_in(0, 0, 0, B, 0), None, 0, None) is None    # NOT_SUPPORTED: not read
