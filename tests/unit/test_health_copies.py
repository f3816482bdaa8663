"""nvbandwidth's real outputs read (tests/fixtures/health/nvbandwidth_*, sources in its SOURCES.md), and the same
files saved as a node's nvbandwidth.txt, through `--health-from`'s reader."""

from __future__ import annotations

import shutil

import pytest

from bench.cluster.health import from_dir, nvbandwidth
from bench.core.errors import BadInput
from tests.health_fixtures import HEALTH, codes, text

A100_H2D = HEALTH / "nvbandwidth_h2d-memcpy-sm_a100-sxm4-40gb.txt"
A100_D2D = HEALTH / "nvbandwidth_d2d-read-ce_a100-sxm4-80gb-x8_pattern-check-assert.txt"
GB300 = HEALTH / "nvbandwidth_gb300-dgx-station_h2d-d2h-ce_excerpt.txt"


def test_a100_h2d_by_sm_copy_is_one_gpu_at_25_gb_s():
    out = nvbandwidth.parse(text(A100_H2D))
    assert (out.version, out.driver) == ("v0.8", "560.35.05")
    assert out.devices == {0: ("NVIDIA A100-SXM4-40GB", "00000000:99:00")}
    (t,) = out.tests
    assert (t.name, t.kind, t.method, t.unit, t.direction, t.row_kind) == (
        "host_to_device_memcpy_sm", "h2d", "sm", "GB/s", "->", "CPU")
    assert t.rows == {0: [25.13]} and t.total == 25.13 and t.errors == []
    assert nvbandwidth.figures(out) == [{"test": "host_to_device_memcpy_sm", "kind": "h2d", "method": "sm", "gpu": 0,
                                         "peer": None, "gbps": 25.13, "name": "NVIDIA A100-SXM4-40GB",
                                         "bus_id": "00000000:99:00"}]
    assert nvbandwidth.findings(out) == []


def test_gb300_h2d_d2h_and_both_at_once_each_a_figure():
    out = nvbandwidth.parse(text(GB300))
    assert [(t.name, t.kind, t.direction, t.rows, t.total) for t in out.tests] == [
        ("host_to_device_memcpy_ce", "h2d", "->", {0: [359.05]}, 359.05),
        ("device_to_host_memcpy_ce", "d2h", "<-", {0: [377.15]}, 377.15),
        ("host_to_device_bidirectional_memcpy_ce", "h2d_bidir", "<->", {0: [175.38]}, 175.38)]
    # The excerpt has no "Device N:" line: the figures are the GPU's all the same, its name unknown.
    assert [(f["kind"], f["gpu"], f["gbps"], f["name"]) for f in nvbandwidth.figures(out)] == [
        ("h2d", 0, 359.05, None), ("d2h", 0, 377.15, None), ("h2d_bidir", 0, 175.38, None)]


def test_a100_x8_d2d_pattern_check_assert_is_a_finding_not_a_crash():
    out = nvbandwidth.parse(text(A100_D2D))
    assert len(out.devices) == 8 and out.devices[4] == ("NVIDIA A100-SXM4-80GB", "00000000:9b:00")
    (t,) = out.tests
    assert (t.name, t.kind, t.rows, t.total) == ("device_to_device_memcpy_read_ce", "d2d_read", {}, None)
    assert t.errors[0] == "Invalid value when checking the pattern at 0x70a640000000"
    assert t.errors[2].startswith("ASSERT in expression h_errorFlag == 0")
    assert nvbandwidth.figures(out) == []
    (f,) = nvbandwidth.findings(out)
    assert (f["code"], f["severity"], f["action"], f["gpu_index"]) == ("nvbandwidth-data-mismatch", "fail", "drain",
                                                                          None)
    assert "device_to_device_memcpy_read_ce" in f["what"] and "0x70a640000000" in f["what"] and "no figure" in f["what"]


def _folder(tmp_path, name, files):
    d = tmp_path / name
    d.mkdir()
    for dest, src in files.items():
        shutil.copy(src, d / dest)
    return d


def test_health_from_reads_a_saved_nvbandwidth_txt_per_gpu(tmp_path):
    d = _folder(tmp_path, "node-a100", {"nvbandwidth.txt": A100_H2D})
    report = from_dir(str(d))
    assert report["read"]["nvbandwidth"].startswith("1 test(s), 1 figure(s)")
    (c,) = report["copies"]
    assert (c["kind"], c["gbps"], c["gpu_index"], c["bus_id"], c["name"]) == (
        "h2d", 25.13, 0, "0000:99:00.0", "NVIDIA A100-SXM4-40GB")
    assert report["findings"] == []


def test_health_from_names_the_d2d_assert_as_a_node_finding(tmp_path):
    d = _folder(tmp_path, "node-a100x8", {"nvbandwidth.txt": A100_D2D})
    report = from_dir(str(d))
    assert codes(report["findings"]) == [("nvbandwidth-data-mismatch", "fail", "drain", None)]
    assert report["copies"] == []


def test_a_nvbandwidth_txt_that_is_not_nvbandwidth_output_is_bad_input(tmp_path):
    d = tmp_path / "node"
    d.mkdir()
    (d / "nvbandwidth.txt").write_text("hello\n")
    with pytest.raises(BadInput, match="nvbandwidth.txt: no 'Running <test>.' line"):
        from_dir(str(d))
