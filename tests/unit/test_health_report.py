"""The health report: from_dir over folders assembled from recorded outputs, its bad input, since, the table,
the helpers validate uses (worst, bus id -> GPU index), the disk floor, and collect_live with its commands
replaced (unit tests start no process)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone

import pytest

from bench.cluster.health import collect_live, from_dir, gpu_index_for_bus, worst
from bench.cluster.accel.nvidia import health_live
from bench.cluster.health import live
from bench.cluster.findings import ACTIONS, FIELDS, bus_key, table
from bench.cluster.health.host import disk_findings
from bench.cluster.accel.nvidia.nvml import NvmlRead
from bench.cluster.accel.nvidia.smi import SmiAnswer
from bench.core.errors import BadInput
from tests.health_fixtures import GPU, HEALTH, NET


def folder(tmp_path, **files) -> str:
    d = tmp_path / "node7"
    d.mkdir()
    for name, src in files.items():
        shutil.copyfile(src, d / name.replace("_", "-").replace("-txt", ".txt").replace("-json", ".json"))
    return str(d)


def test_from_dir_gives_the_union_of_its_files_tied_to_the_gpus_of_nvidia_smi_q(tmp_path):
    d = folder(tmp_path, nvidia_smi_q_txt=HEALTH / "nvidia-smi-q_h100x8_hw-slowdown-power-brake-active.txt",
               nvidia_smi_nvlink_txt=HEALTH / "nvidia-smi-nvlink-status_a100-sxm4-80gb_all-links-inactive.txt",
               dmesg_txt=HEALTH / "dmesg_xid119_gsp-rpc-timeout_xe9680.txt",
               ibstat_txt=HEALTH / "ibstat_12-hca_3-ports-down-disabled.txt",
               dcgmi_diag_txt=HEALTH / "dcgmi-diag-r3_row-remap-pending-error_excerpt.txt")
    r = from_dir(d)
    assert r["host"] == "node7" and r["since"] is None and len(r["gpus"]) == 8
    got = sorted((f["code"], f["severity"], f["action"], f["gpu_index"], f["bus_id"], f["port"]) for f in r["findings"])
    buses = ["19", "3b", "4c", "5d", "9b", "bb", "cb", "db"]
    assert got == sorted([
        *[("throttle-power-brake", "warn", "reseat", i, f"0000:{b}:00.0", None) for i, b in enumerate(buses)],
        ("nvlink-down", "fail", "reset-gpu", 6, "0000:cb:00.0", None),      # index -> bus from nvidia-smi -q
        ("xid-119", "fail", "reset-gpu", 4, "0000:9b:00.0", None),          # bus -> index from nvidia-smi -q
        ("dcgm-fail", "fail", "drain", 3, "0000:5d:00.0", None),
        ("ib-port-down", "fail", "reseat", None, None, "mlx5_2/1"),
        ("ib-port-down", "fail", "reseat", None, None, "mlx5_7/1"),
        ("ib-port-down", "fail", "reseat", None, None, "mlx5_8/1"),
    ])
    assert [f["severity"] for f in r["findings"]][:6] == ["fail"] * 6 and r["findings"][6]["severity"] == "warn"
    assert set(r["read"]) == {"nvidia-smi -q", "nvidia-smi nvlink", "kernel-log", "infiniband", "dcgm", "fabric"}
    assert {n["source"]: n["expected"] for n in r["not_read"]} == {"gpudirect-rdma": False}
    assert all(set(f) == set(FIELDS) for f in r["findings"])
    json.dumps(r)   # JSON-able
    assert worst(r) == "fail"


def test_a_kernel_log_event_on_a_bus_no_listed_gpu_has_keeps_its_bus_and_no_index(tmp_path):
    d = folder(tmp_path, nvidia_smi_q_txt=HEALTH / "nvidia-smi-q_h100x8_gpu2-sw-power-cap-sw-thermal-active.txt",
               dmesg_txt=HEALTH / "dmesg_xid119_gsp-rpc-timeout_xe9680.txt")
    xid = [f for f in from_dir(d)["findings"] if f["code"] == "xid-119"]
    assert [(f["gpu_index"], f["bus_id"]) for f in xid] == [(None, "0000:9b:00.0")]   # 9b is not on that node


def test_from_dir_of_a_healthy_node_has_no_fail_or_warn(tmp_path):
    d = folder(tmp_path, nvidia_smi_q_txt=GPU / "nvidia-smi-q_a100-sxm4-80gb_x8.txt",
               nvidia_smi_txt=GPU / "nvidia-smi_a100-sxm4-80gb_x8.txt",
               nvidia_smi_nvlink_txt=GPU / "nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt",
               ibstat_txt=NET / "ibstat_cx7-ndr400-ib_2-cas.txt",
               dcgmi_diag_json=HEALTH / "dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt")
    r = from_dir(d)
    assert r["findings"] == [] and worst(r) == "ok" and len(r["gpus"]) == 8
    assert {n["source"] for n in r["not_read"] if not n["expected"]} == {"kernel-log", "gpudirect-rdma"}


def test_from_dir_since_applies_to_the_kernel_log(tmp_path):
    d = folder(tmp_path, dmesg_txt=HEALTH / "dmesg_xid119_gsp-rpc-timeout_xe9680.txt")
    since = datetime(2025, 2, 23, 16, 25).timestamp()
    r = from_dir(d, since=since)
    assert [(f["code"], f["count"]) for f in r["findings"]] == [("xid-119", 2)]
    assert r["since"] == datetime.fromtimestamp(since, timezone.utc).isoformat(timespec="seconds")


def test_from_dir_reads_a_sysfs_copy_of_the_infiniband_counters(tmp_path):
    from tests.unit.test_health_network import sysfs_from_dump
    d = tmp_path / "node3"
    sysfs_from_dump((HEALTH / "sysfs-ib-counters_mlx5_1_link-downed-255-xmit-discards-65535.txt").read_text(),
                    d / "infiniband" / "mlx5_1" / "ports" / "1")
    r = from_dir(str(d))
    assert [(f["code"], f["severity"], f["action"], f["port"]) for f in r["findings"]] == [("ib-errors", "warn", "watch", "mlx5_1/1")]


def test_a_saved_nvidia_smi_failure_is_the_drivers_finding_not_bad_input(tmp_path):
    r = from_dir(folder(tmp_path, nvidia_smi_q_txt=GPU / "nvidia-smi-failed_no-driver.txt"))
    assert [(f["code"], f["severity"]) for f in r["findings"]] == [("driver-not-answering", "fail")]
    assert {"source": "nvidia-smi -q", "expected": True} == {k: v for k, v in r["not_read"][0].items() if k != "reason"}


@pytest.mark.parametrize("name,content,says", [
    ("nvidia-smi-q.txt", (GPU / "nvidia-smi_t4x5.txt").read_text(), "no 'GPU <bus id>' block"),
    ("ibstat.txt", (HEALTH / "dmesg_xid63_row-remapper_line.txt").read_text(), "not `ibstat` output"),
    ("nvidia-smi-nvlink.txt", (GPU / "nvidia-smi_t4x5.txt").read_text(), "not `nvidia-smi nvlink -s` output"),
    ("dcgmi-diag.json", (HEALTH / "dcgmi-diag-r4_dcgm4_json_diagnostic-test-entity-results_excerpt.txt").read_text(),
     "not dcgmi diag JSON"),
    ("dcgmi-diag.txt", (HEALTH / "dmesg_xid63_row-remapper_line.txt").read_text(), "not a `dcgmi diag` table"),
    ("nvidia-smi.txt", (HEALTH / "dmesg_xid63_row-remapper_line.txt").read_text(), "not nvidia-smi output"),
])
def test_a_file_that_is_not_what_its_name_says_is_bad_input_naming_it(tmp_path, name, content, says):
    (tmp_path / name).write_text(content)
    with pytest.raises(BadInput) as e:
        from_dir(str(tmp_path))
    assert str(e.value).startswith(str(tmp_path / name)) and says in str(e.value) and "\n" not in str(e.value)


def test_a_binary_file_a_missing_folder_and_an_empty_one_are_bad_input(tmp_path):
    (tmp_path / "dmesg.txt").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00")
    with pytest.raises(BadInput, match=r"dmesg\.txt: a binary file"):
        from_dir(str(tmp_path))
    with pytest.raises(BadInput, match="no such folder"):
        from_dir(str(tmp_path / "gone"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="none of the files"):
        from_dir(str(tmp_path / "empty"))


def test_every_code_of_the_table_has_a_meaning_a_severity_an_action_and_a_source():
    t = table()
    assert set(t["actions"]) == set(ACTIONS) and set(t["severities"]) == {"fail", "warn", "info"}
    for code, e in t["codes"].items():
        assert e["severity"] in t["severities"] and e["action"] in ACTIONS, code
        assert e["meaning"] and "\n" not in e["meaning"] and e["source"], code
    for code in ("xid-79", "xid-48", "xid-63", "xid-64", "xid-74", "xid-92", "xid-94", "xid-95", "xid-119", "xid-13",
                 "xid-31", "xid-43", "xid-45", "xid-145", "xid-unknown", "row-remap-pending", "row-remap-failed",
                 "retired-pages-pending", "ecc-uncorrectable-volatile", "ecc-uncorrectable-aggregate",
                 "throttle-hw-slowdown", "throttle-hw-thermal", "throttle-power-brake", "pcie-width-degraded",
                 "pcie-gen-degraded", "gpu-reset-required", "fallen-off-bus", "driver-not-answering", "nvlink-down",
                 "nvlink-errors", "ib-port-down", "ib-port-slow", "ib-errors", "gpudirect-rdma-missing", "dcgm-fail",
                 "dcgm-warn", "disk-low"):
        assert code in t["codes"], code


@pytest.mark.parametrize("bus", ["0000:9b:00", "00000000:9B:00.0", "9b:00.0", "PCI:0000:9b:00"])
def test_every_spelling_of_a_bus_id_finds_the_same_gpu(bus):
    gpus = [{"index": 3, "bus_id": "00000000:9B:00.0", "name": "x"}, {"index": 4, "bus_id": "00000000:BB:00.0"}]
    assert bus_key(bus) == "0000:9b:00.0" and gpu_index_for_bus(gpus, bus) == 3
    assert gpu_index_for_bus(gpus, "0000:9c:00") is None


def test_worst_orders_fail_over_warn_over_info():
    assert worst({"findings": []}) == "ok"
    assert worst({"findings": [{"severity": "info"}, {"severity": "warn"}]}) == "warn"
    assert worst({"findings": [{"severity": "warn"}, {"severity": "fail"}, {"severity": "info"}]}) == "fail"


def test_free_space_below_the_floors_is_low_or_full_and_says_which_floor(tmp_path):
    assert disk_findings([str(tmp_path)], low=1, full=0)[0] == []
    low, read = disk_findings([str(tmp_path)], low=1 << 62, full=0)
    assert [(f["code"], f["severity"], f["action"]) for f in low] == [("disk-low", "warn", "free-space")]
    assert "floor" in low[0]["what"] and "free" in read[str(tmp_path)]
    full, _ = disk_findings([str(tmp_path / "not" / "yet")], full=1 << 62)
    assert [(f["code"], f["severity"]) for f in full] == [("disk-full", "fail")] and str(tmp_path) in full[0]["what"]


def stub_tools(monkeypatch, *, nvml: NvmlRead, smi: dict, tools: dict):
    monkeypatch.setattr(health_live.nvml, "read", lambda: nvml)
    monkeypatch.setattr(health_live, "run_smi", lambda args, timeout=20.0: smi.get(" ".join(args), SmiAnswer(None, "", "", "nvidia-smi not found", missing=True)))
    monkeypatch.setattr(live, "run_tool", lambda argv, timeout=10.0: tools.get(argv[0], (None, f"{argv[0]} not installed")))
    monkeypatch.setattr(live.dcgm, "run", lambda level, timeout: (None, "dcgmi not installed", False))


def test_a_cpu_node_says_it_has_no_gpu_and_still_reads_its_kernel_log_and_disk(monkeypatch, tmp_path):
    stub_tools(monkeypatch, nvml=NvmlRead(reason="NVML: library not found", no_driver=True), smi={},
               tools={"dmesg": ((HEALTH / "dmesg_xid63_row-remapper_line.txt").read_text(), None)})
    r = collect_live(folders=[str(tmp_path)], dcgm_level=1, root=str(tmp_path))
    assert r["gpus"] == [] and set(r["read"]) == {"kernel-log", "disk"}
    assert {(n["source"], n["expected"]) for n in r["not_read"]} == {("gpu", False), ("infiniband", False), ("dcgm", False)}
    assert [f["code"] for f in r["findings"]] == ["xid-63"]


def test_a_refused_kernel_log_is_not_read_and_expected(monkeypatch, tmp_path):
    denied = (None, "dmesg --time-format iso exited 1: dmesg: read kernel buffer failed: Operation not permitted")
    stub_tools(monkeypatch, nvml=NvmlRead(reason="x", no_driver=True), smi={},
               tools={"dmesg": denied, "journalctl": (None, "journalctl -k exited 1: No journal files were found.")})
    r = collect_live(root=str(tmp_path))
    kl = [n for n in r["not_read"] if n["source"] == "kernel-log"]
    assert kl[0]["expected"] is True and kl[0]["reason"].startswith("permission denied: ")


def test_without_nvml_a_driver_that_does_not_answer_nvidia_smi_is_a_finding(monkeypatch, tmp_path):
    no_driver = (GPU / "nvidia-smi-failed_no-driver.txt").read_text()
    stub_tools(monkeypatch, nvml=NvmlRead(reason="NVML: Driver Not Loaded", no_driver=True),
               smi={"-q": SmiAnswer(9, no_driver, "", "exited 9: NVIDIA-SMI has failed")}, tools={})
    r = collect_live(root=str(tmp_path))
    assert [(f["code"], f["severity"], f["action"]) for f in r["findings"]] == [("driver-not-answering", "fail", "reboot")]


def test_without_nvml_nvidia_smi_q_and_nvlink_give_the_gpus_and_their_findings(monkeypatch, tmp_path):
    stub_tools(monkeypatch, nvml=NvmlRead(reason="NVML: Driver Not Loaded", no_driver=True), tools={}, smi={
        "-q": SmiAnswer(0, (HEALTH / "nvidia-smi-q_a10_remapped-rows-pending.txt").read_text(), ""),
        "nvlink -s": SmiAnswer(0, "", "")})
    r = collect_live(root=str(tmp_path))
    assert r["gpus"] == [{"index": 0, "bus_id": "00000000:07:00.0", "name": "NVIDIA A10"}]
    assert [(f["code"], f["gpu_index"]) for f in r["findings"]] == [("row-remap-pending", 0)]
    assert set(r["read"]) == {"nvidia-smi -q", "nvidia-smi nvlink"}


def test_with_nvml_its_gpus_findings_lost_gpus_and_failed_readings_are_reported(monkeypatch, tmp_path):
    from bench.cluster.accel.nvidia.gpu_state import GpuHealth
    sick = GpuHealth(1, "00000000:3B:00.0", "NVIDIA H100 80GB HBM3", remap_pending=True,
                     nvlinks=[{"link": 0, "active": True, "errors": {}}, {"link": 1, "active": False, "errors": {}}],
                     unreadable={"ECC volatile": "NVML error 999"})
    got = NvmlRead(gpus=[GpuHealth(0, "00000000:19:00.0", "NVIDIA H100 80GB HBM3"), sick], lost=[(2, "GPU is lost")],
                   driver="550.54.15")
    stub_tools(monkeypatch, nvml=got, smi={}, tools={})
    r = collect_live(root=str(tmp_path))
    assert [g["index"] for g in r["gpus"]] == [0, 1] and r["read"]["nvml"] == "2 GPU(s), driver 550.54.15"
    assert sorted((f["code"], f["gpu_index"], f["bus_id"]) for f in r["findings"]) == [
        ("gpu-unreachable", 2, None), ("nvlink-down", 1, "0000:3b:00.0"), ("row-remap-pending", 1, "0000:3b:00.0")]
    assert {"source": "nvml", "reason": "GPU 1 ECC volatile: NVML error 999", "expected": True} in r["not_read"]
