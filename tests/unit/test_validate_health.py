"""bench validate --health-from: each recorded real output, saved as a node's report, through the whole path to
the node's verdict and bench's exit status (the parsers themselves: test_health_*.py).

The recordings are tests/fixtures/health (unhealthy nodes) and tests/fixtures/{gpu,net} (healthy ones), each
with its source in SOURCES.md, copied under the file name a saved report has.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# (recording, the name it is saved under, exit status, the node's verdict, its worst finding: code, severity,
# action, GPU index or None). Exit 1 drains the node; 0 keeps it in service, degraded where a finding WARNs.
UNHEALTHY = [
    ("nvidia-smi-q_a10_remapped-rows-pending.txt", "nvidia-smi-q.txt", 1, "drain",
     ("row-remap-pending", "fail", "reset-gpu", 0)),
    ("nvidia-smi-q_ecc-sram-uncorrectable_excerpt.txt", "nvidia-smi-q.txt", 1, "drain",
     ("ecc-uncorrectable-volatile", "fail", "reset-gpu", 0)),
    ("nvidia-smi-q_h100x8_hw-slowdown-power-brake-active.txt", "nvidia-smi-q.txt", 0, "degraded",
     ("throttle-power-brake", "warn", "reseat", 0)),
    ("nvidia-smi-q_h100x8_gpu2-sw-power-cap-sw-thermal-active.txt", "nvidia-smi-q.txt", 0, "degraded",
     ("throttle-power-brake", "warn", "reseat", 2)),
    ("nvidia-smi-a-i0_unable-to-determine-device-handle_unknown-error.txt", "nvidia-smi.txt", 1, "drain",
     ("gpu-unreachable", "fail", "reboot", None)),
    ("nvidia-smi-nvlink-status_a100-sxm4-80gb_all-links-inactive.txt", "nvidia-smi-nvlink.txt", 1, "drain",
     ("nvlink-down", "fail", "reset-gpu", 6)),
    ("nvidia-smi-nvlink_b200_all-links-inactive_uuid-redacted.txt", "nvidia-smi-nvlink.txt", 1, "drain",
     ("nvlink-down", "fail", "reset-gpu", 2)),
    ("dmesg_xid79_aer-surprise-down_fallen-off-bus_tesla_excerpt.txt", "dmesg.txt", 1, "drain",
     ("aer-fatal", "fail", "reseat", None)),
    ("dmesg_fallen-off-bus-no-xid_multiline_10de-26b5.txt", "dmesg.txt", 1, "drain",
     ("fallen-off-bus", "fail", "reboot", None)),
    ("dmesg_xid119_gsp-rpc-timeout_xe9680.txt", "dmesg.txt", 1, "drain", ("xid-119", "fail", "reset-gpu", None)),
    ("syslog_xid48-dbe_xid64-retirement-failed_rminitadapter_excerpt.txt", "dmesg.txt", 1, "drain",
     ("rminit-failed", "fail", "reboot", None)),
    ("journalctl-k_xid45-caused-by-xid145-xid149_excerpt.txt", "dmesg.txt", 1, "drain",
     ("xid-149", "fail", "reset-gpu", None)),
    # A row marked for remapping: the driver's own counters (row-remap-pending) decide; the event alone warns.
    ("dmesg_xid63_row-remapper_line.txt", "dmesg.txt", 0, "degraded", ("xid-63", "warn", "reset-gpu", None)),
    ("dmesg-T-grep-NVRM_xid43-xid31-xid94_excerpt.txt", "dmesg.txt", 0, "degraded",
     ("xid-94", "warn", "restart-app", None)),
    ("dmesg_sxid22013_nvswitch-minion-dlreq_h100-ppcie_excerpt.txt", "dmesg.txt", 0, "degraded",
     ("sxid-nonfatal", "warn", "watch", None)),
    ("ibstat_12-hca_3-ports-down-disabled.txt", "ibstat.txt", 1, "drain", ("ib-port-down", "fail", "reseat", None)),
    ("ibstat_mlx5_10-down-polling_guids-redacted_excerpt.txt", "ibstat.txt", 1, "drain",
     ("ib-port-down", "fail", "reseat", None)),
    ("ibstat_mlx5_7_state-down-physical-linkup_sriov-pod.txt", "ibstat.txt", 1, "drain",
     ("ib-port-no-sm", "fail", "check-fabric", None)),
    ("ibqueryerrors_linkdowned-rcverrors-xmitdiscards_line.txt", "ibqueryerrors.txt", 0, "degraded",
     ("ib-errors", "warn", "watch", None)),
    ("dcgmi-diag-r2_gpu-memory-fail-thermal-violation_excerpt.txt", "dcgmi-diag.txt", 1, "drain",
     ("dcgm-fail", "fail", "drain", 0)),
    ("dcgmi-diag-r3_dcgm3.3.8_h100x8_gpu-memory-fail-cuinit.txt", "dcgmi-diag.txt", 1, "drain",
     ("dcgm-fail", "fail", "drain", 0)),
    ("dcgmi-diag-r3_row-remap-pending-error_excerpt.txt", "dcgmi-diag.txt", 1, "drain",
     ("dcgm-fail", "fail", "drain", 3)),
    ("dcgmi-diag_dcgm4.2.3_l40s-x4_pcie-fail-internal-error.txt", "dcgmi-diag.txt", 1, "drain",
     ("dcgm-fail", "fail", "drain", None)),
    # nvbandwidth's pattern check failed on a D2D copy: the copied data did not match (issue 41 item 5).
    ("nvbandwidth_d2d-read-ce_a100-sxm4-80gb-x8_pattern-check-assert.txt", "nvbandwidth.txt", 1, "drain",
     ("nvbandwidth-data-mismatch", "fail", "drain", None)),
]

HEALTHY = [
    ("gpu/nvidia-smi-q_a100-sxm4-80gb_x8.txt", "nvidia-smi-q.txt"),
    ("gpu/nvidia-smi-q_t4_excerpt.txt", "nvidia-smi-q.txt"),
    ("gpu/nvidia-smi-q_rtx3070_excerpt.txt", "nvidia-smi-q.txt"),
    ("health/dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt", "dcgmi-diag.json"),
    ("net/ibstat_cx7-ndr400-ib_2-cas.txt", "ibstat.txt"),
    ("net/ibstat_cx6dx-100g-roce.txt", "ibstat.txt"),
    # Host copies at their link's published figure (A100 SXM4, PCIe gen4), and a GB300's over NVLink-C2C (its
    # excerpt names no device: judged by nothing but peers, of which it has none).
    ("health/nvbandwidth_h2d-memcpy-sm_a100-sxm4-40gb.txt", "nvbandwidth.txt"),
    ("health/nvbandwidth_gb300-dgx-station_h2d-d2h-ce_excerpt.txt", "nvbandwidth.txt"),
]


def _saved(tmp_path: Path, recording: Path, name: str) -> Path:
    node = tmp_path / "node7"
    node.mkdir()
    shutil.copyfile(recording, node / name)
    return node


def _judged(tmp_path: Path, node: Path, *extra: str):
    got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "results"), "--json", *extra)
    return got, (json.loads(got.stdout) if got.stdout.strip() else None)


@pytest.mark.parametrize("recording,name,status,verdict,worst", UNHEALTHY, ids=[u[0] for u in UNHEALTHY])
def test_each_recorded_fault_gives_its_finding_severity_action_and_the_nodes_exit_status(
        tmp_path, recording, name, status, verdict, worst):
    got, rec = _judged(tmp_path, _saved(tmp_path, FIXTURES / "health" / recording, name))
    assert got.returncode == status, got.stderr
    node = rec["nodes"]["node7"]
    assert node["verdict"] == verdict and rec["exit_status"] == status
    findings = rec["measured"]["health"]["node7"]["findings"]
    first = findings[0]
    assert (first["code"], first["severity"], first["action"], first["gpu_index"]) == worst, findings[:3]
    # The row that drains (or warns) names the GPU where the finding is about one, and carries the action.
    row = next(c for c in rec["checks"] if c["check"] == "health" and c["status"] in ("FAIL", "WARN"))
    assert row["node"] == ("node7" if worst[3] is None else f"node7:{worst[3]}")
    assert row["action"] == worst[2] and worst[0] in row["value"]
    if verdict == "drain":
        assert node["action"] == worst[2] and rec["drain"][0]["check"] == "health"
    assert rec["level"] == "health" and [s["stage"] for s in rec["stages"]] == ["health"]


@pytest.mark.parametrize("recording,name", HEALTHY, ids=[h[0] for h in HEALTHY])
def test_a_healthy_recording_gives_no_finding_and_exit_0(tmp_path, recording, name):
    got, rec = _judged(tmp_path, _saved(tmp_path, FIXTURES / recording, name))
    assert got.returncode == 0, got.stdout + got.stderr
    assert rec["nodes"]["node7"]["verdict"] == "healthy", rec["nodes"]
    assert [f for f in rec["measured"]["health"]["node7"]["findings"] if f["severity"] in ("fail", "warn")] == []
    assert {c["status"] for c in rec["checks"] if c["check"] == "health"} == {"PASS"}


def test_the_one_line_names_the_finding_and_its_action(tmp_path):
    node = _saved(tmp_path, FIXTURES / "health" / "nvidia-smi-q_a10_remapped-rows-pending.txt", "nvidia-smi-q.txt")
    got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "results"))
    assert got.returncode == 1
    (line,) = got.stdout.splitlines()
    assert line.startswith("bench validate health: FAIL: health node7:0: row-remap-pending (fail)") and \
        "action: reset-gpu" in line, line


@pytest.mark.parametrize("make,says", [
    (lambda d: None, "no such folder"),
    (lambda d: d.mkdir(), "none of the files a health folder may hold"),
    (lambda d: (d.mkdir(), (d / "dmesg.txt").write_bytes(b"\x7fELF\x00\x01\x02")), "a binary file"),
])
def test_a_missing_empty_or_binary_report_folder_is_refused_in_one_line(tmp_path, make, says):
    d = tmp_path / "saved"
    make(d)
    got = cli("validate", "--health-from", str(d), "--out", str(tmp_path / "results"))
    assert got.returncode == 2 and says in got.stderr and "Traceback" not in got.stderr, got.stderr
    assert len(got.stderr.strip().splitlines()) == 1


def test_health_from_refuses_what_needs_a_live_node(tmp_path):
    for extra in (["--drain"], ["--undrain"], ["--soak", "1h"]):
        got = cli("validate", "--health-from", str(tmp_path), *extra)
        assert got.returncode == 2 and "--health-from" in got.stderr, (extra, got.stderr)


def test_a_saved_nvbandwidth_txt_is_judged_against_its_link_and_the_line_says_so(tmp_path):
    node = _saved(tmp_path, FIXTURES / "health" / "nvbandwidth_h2d-memcpy-sm_a100-sxm4-40gb.txt", "nvbandwidth.txt")
    got, rec = _judged(tmp_path, node)
    assert got.returncode == 0
    report = rec["measured"]["health"]["node7"]
    (judged,) = report["copies_judged"]
    assert judged["status"] == "PASS" and judged["kind"] == "h2d"
    assert judged["line"].startswith("GPU 0 (0000:99:00.0) NVIDIA A100-SXM4-40GB: H2D 25.13 GB/s, fewer than 3 peers; "
                                     "101% of 24.80 GB/s published for PCIe gen4 x16 H2D")
