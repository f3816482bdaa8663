"""nvbandwidth's real outputs read (tests/fixtures/health/nvbandwidth_*, sources in its SOURCES.md), and the same
files saved as a node's nvbandwidth.txt, through `--health-from`'s reader."""

from __future__ import annotations

import shutil

import pytest

from bench.analysis import copies
from bench.cluster.accel.nvidia import nvbandwidth
from bench.cluster.health import from_dir
from bench.cluster.findings import entry
from bench.core.gpus import lookup
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


# --- judging (bench.analysis.copies) on published figures: each number below is in copy_references.json's sources.

def _h100(gbps: list[float], kind: str = "h2d", method: str = "ce") -> list[dict]:
    return [{"gpu": f"h100vm:{i}", "model": "NVIDIA H100 80GB HBM3", "kind": kind, "method": method, "gbps": v,
             "pcie_gen": 5, "pcie_width": 16} for i, v in enumerate(gbps)]


def test_the_h100_of_nvbandwidth_issue_6_fails_by_its_peers_and_its_link():
    """NVIDIA/nvbandwidth#6: on a 4x H100 VM host-to-device ran 14.2, 57.06, 56.68 and 57.07 GB/s."""
    rows = copies.judge(_h100([14.2, 57.06, 56.68, 57.07]))
    assert [(r.status, r.code) for r in rows] == [("FAIL", "copy-slow")] + [("PASS", None)] * 3
    assert rows[0].line.startswith("h100vm:0 NVIDIA H100 80GB HBM3: H2D 14.20 GB/s over PCIe Gen5 x16, -75% against "
                                   "the median 56.87 GB/s of 4 peers")
    assert "25% of 56.68 GB/s published for PCIe gen5 x16 H2D (nvbandwidth, H100 (NVIDIA/nvbandwidth#6" in rows[0].line


# CUDA bandwidthTest's "MB/s" up to CUDA 10.0 (the version gearshifft#82 ran): (1 << 10) x bytes / (ms x (1 << 20)),
# i.e. 1,024,000 bytes/s (bench/data/copy_references.json, "units").
MBS = 1.024e6 / 1e9


def test_the_p100_bound_to_the_far_socket_fails_against_its_own_socket_figure():
    """gearshifft#82: the same P100 copied 3783.4 MB/s host-to-device from the far socket, 12150.7 from its own."""
    far, near = copies.judge([{"gpu": "p100:far", "model": "Tesla P100-PCIE-16GB", "kind": "h2d", "gbps": 3783.4 * MBS},
                              {"gpu": "p100:near", "model": "Tesla P100-PCIE-16GB", "kind": "h2d",
                               "gbps": 12150.7 * MBS}])
    assert (far.status, far.code, near.status) == ("FAIL", "copy-slow", "PASS")
    assert "31% of 12.44 GB/s published for PCIe gen3 x16 H2D" in far.line and "fewer than 3 peers" in far.line


def test_bandwidth_test_s_mb_per_s_are_converted_in_the_table_and_said():
    """The P100's three figures as bandwidthTest printed them, in GB/s by its own formula (issue 48)."""
    raw = copies.load().raw
    assert "1,024,000" in " ".join(raw["_about"])
    assert raw["host_links"]["pcie3"]["h2d_gbps"] == round(12150.7 * MBS, 2) == 12.44
    assert raw["host_links"]["pcie3"]["d2h_gbps"] == round(12890.6 * MBS, 2) == 13.2
    assert raw["memory"]["Tesla P100-PCIE-16GB"]["copy_gbps"] == round(443837.7 * MBS, 2) == 454.49
    assert raw["copy_share"] == round(454.49 / 732, 2)


def test_a_kernel_copy_is_not_a_copy_engine_copys_peer_and_an_x8_link_is_judged_as_x8():
    """NVIDIA/nvbandwidth#24's 8x H100 ran device-to-host by SM at 52.76-52.78 GB/s."""
    sm = copies.judge(_h100([52.77, 52.77, 52.77, 52.78, 52.76, 52.77, 52.78, 52.77], "d2h", "sm")
                      + _h100([14.2], "d2h", "ce"))
    assert [r.status for r in sm[:8]] == ["PASS"] * 8 and "of 8 peers" in sm[0].line
    assert sm[8].status == "FAIL" and "fewer than 3 peers" in sm[8].line
    (x8,) = copies.judge([{"gpu": "a", "model": "NVIDIA A100-SXM4-40GB", "kind": "h2d", "gbps": 12.4, "pcie_gen": 4,
                           "pcie_width": 8}])
    assert x8.status == "PASS" and "of 12.40 GB/s published for PCIe gen4 x8 H2D; x16 figure 24.8 x 0.5" in x8.line


def test_memory_copies_against_a_published_copy_or_the_peak_times_the_share_a_copy_reaches():
    p100, h100, local = copies.judge([
        {"gpu": "p", "model": "Tesla P100-PCIE-16GB", "kind": "d2d", "gbps": 443837.7 * MBS},   # gearshifft#82's
        {"gpu": "h", "model": "NVIDIA H100 80GB HBM3", "kind": "d2d", "gbps": 900.0},
        {"gpu": "l", "model": "NVIDIA H100 80GB HBM3", "kind": "local", "gbps": 900.0}])   # counted once: x 2
    assert p100.status == "PASS" and "of 454.49 GB/s published for HBM2 (Tesla P100-PCIE-16GB)" in p100.line
    assert (h100.status, h100.code) == ("FAIL", "memory-copy-slow")
    assert "of 2077.00 GB/s published for HBM3 (NVIDIA H100 80GB HBM3); peak 3350 x copy_share 0.62" in h100.line
    assert (local.gbps, local.status, local.code) == (1800.0, "PASS", None)


def test_every_reference_row_has_its_source_and_names_a_model_bench_knows():
    table = copies.load()
    for name, e in {**table.raw["host_links"], **table.raw["memory"]}.items():
        assert e["source"] and e["cite"], name
    for section in ("models", "memory"):
        for name in table.raw[section]:
            assert lookup(name) is not None and lookup(name).name == name, name
    for e in table.raw["models"].values():
        assert e["host_link"] in table.raw["host_links"] and e["source"]
    # The codes a verdict carries are the health table's, with the severity its status says.
    for (_, status), code in copies.CODES.items():
        assert entry(code)["severity"] == status.lower()


def test_a_figures_own_repeats_widen_the_peer_line_and_a_slow_path_still_fails():
    """Six CPU ranks' 64 MiB memcpy in the suite's healthy validate (namespace hosts on two shared cores), each the
    best of its two turns alone, as measured on 2026-12-05: the six agree within 1% (the peers' spread alone would
    put the line at the 2-3% floor), while one rank's two turns differ by up to 8%, which is what one figure moves.
    A rank 4% below the others is within that; a rank at 60% of them is slow in every turn and FAILs either way."""
    turns = [[42.13, 44.87], [42.62, 44.52], [41.19, 44.89], [43.76, 44.62], [43.35, 43.42], [43.69, 43.22]]

    def figs(rows: list[list[float]], with_rounds: bool) -> list[dict]:
        return [{"gpu": f"h:{i}", "model": "CPU", "kind": "d2d", "gbps": max(t), "method": "alone",
                 "rounds": t if with_rounds else []} for i, t in enumerate(rows)]

    alone, repeated = copies.judge(figs(turns, False)), copies.judge(figs(turns, True))
    assert {v.status for v in alone + repeated} == {"PASS"}
    assert repeated[0].peers.noise > alone[0].peers.noise + 0.02 and "repeated rounds" in repeated[0].peers.how
    low = turns[:5] + [[41.5, 42.6]]        # 4% below the others' median
    assert copies.judge(figs(low, False))[-1].status == "WARN"
    assert copies.judge(figs(low, True))[-1].status == "PASS"
    slow = turns[:5] + [[26.1, 26.8]]
    got = copies.judge(figs(slow, True))[-1]
    assert got.status == "FAIL" and got.code == "memory-copy-slow", got.line
    # Timed by the host clock (as these were): the line is at least the floor measured for it, and says so.
    timed = [dict(f, clock="host") for f in figs(low[:5] + [[40.0, 40.9]], True)]     # 8% below: within it
    got = copies.judge(timed)[-1]
    assert got.status == "PASS" and "WARN below -10%" in got.line, got.line
    assert "host clock on shared cores" in got.peers.how
    got = copies.judge(timed[:5] + [dict(timed[5], gbps=26.8, rounds=[26.1, 26.8])])[-1]
    assert got.status == "FAIL", got.line
