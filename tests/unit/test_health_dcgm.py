"""DCGM diagnostic results from recorded `dcgmi diag` tables (DCGM 3.3.8, 4.2.3 and two excerpts) and JSON
(DCGM 3.1.0 from DCGM's own test data; a 4.x fragment), tests/fixtures/health/SOURCES.md."""

from __future__ import annotations

import json

from bench.cluster.accel.nvidia.dcgm import findings, parse_json, parse_table, status, parse_test
from tests.health_fixtures import HEALTH, codes, text


def table(name: str) -> list[dict]:
    return findings(parse_table(text(HEALTH / name)))


def test_gpu0_failing_gpu_memory_with_thermal_violations_fails_gpu0_only():
    got = table("dcgmi-diag-r2_gpu-memory-fail-thermal-violation_excerpt.txt")
    assert codes(got) == [("dcgm-fail", "fail", "drain", 0)]
    # DCGM's own message, joined back from its 45-character cells.
    assert "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds" in got[0]["what"]
    assert "any other components." in got[0]["what"]


def test_dcgm_338_gpu_memory_fail_all_fails_each_of_the_eight_gpus_with_its_cuinit_message():
    got = table("dcgmi-diag-r3_dcgm3.3.8_h100x8_gpu-memory-fail-cuinit.txt")
    assert codes(got) == [("dcgm-fail", "fail", "drain", i) for i in range(8)]
    assert all(f"GPU {i} Error using CUDA API cuInit" in f["what"] for i, f in enumerate(got))
    assert "'system not yet initialized'" in got[5]["what"]


def test_dcgm_deployment_error_for_pending_row_remaps_fails_gpu3():
    got = table("dcgmi-diag-r3_row-remap-pending-error_excerpt.txt")
    assert codes(got) == [("dcgm-fail", "fail", "drain", 3)]
    assert "GPU 3 has uncorrectable memory errors and row remappings are pending" in got[0]["what"]


def test_dcgm_423_pcie_internal_error_fails_the_node_while_each_gpu_passed():
    results = parse_table(text(HEALTH / "dcgmi-diag_dcgm4.2.3_l40s-x4_pcie-fail-internal-error.txt"))
    pcie = [(r.gpu_index, r.status) for r in results if r.test == "pcie"]
    assert pcie == [(None, "fail"), (0, "pass"), (1, "pass"), (2, "pass"), (3, "pass")]
    got = findings(results)
    assert codes(got) == [("dcgm-fail", "fail", "drain", None)]
    assert "'A child process (152) exited with non-zero status 1'" in got[0]["what"]
    assert "GPU0: Pass" not in got[0]["what"]


def test_dcgm_3x_json_all_pass_gives_records_per_gpu_and_no_finding():
    results, runtime_error = parse_json(text(HEALTH / "dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt"))
    assert runtime_error is None and findings(results) == []
    assert {r.status for r in results} == {"pass"}
    software = [r.gpu_index for r in results if r.test == "software"]
    assert software == list(range(8))                                       # "gpu_ids" : 0 ... 7
    assert [r.gpu_index for r in results if r.test == "Denylist"] == list(range(8))   # "0,1,2,3,4,5,6,7"


def test_dcgm_4x_json_test_object_gives_the_same_record_shape_as_3x():
    """The 4.x file is a fragment (one test object ending in "},", as published): the test decodes that object
    and hands it to the same per-test reader parse_json uses for each test of a whole document."""
    obj = json.loads(text(HEALTH / "dcgmi-diag-r4_dcgm4_json_diagnostic-test-entity-results_excerpt.txt").strip().rstrip(","))
    four = parse_test(obj, "Hardware")
    three, _ = parse_json(text(HEALTH / "dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt"))
    assert [(r.test, r.gpu_index, r.status) for r in four] == [("diagnostic", i, "pass") for i in range(8)]
    assert {type(r) for r in four} == {type(r) for r in three}
    assert sorted({r.gpu_index for r in four}) == sorted({r.gpu_index for r in three if r.test == "software"})
    assert findings(four) == findings([r for r in three if r.test == "software"]) == []


def test_dcgm_status_words_of_both_versions_read_alike():
    # 3.x JSON prints PASS/FAIL/SKIP/WARN, 4.x and the tables Pass/Fail/Skip/Warn (dcgmi/Diag.cpp).
    assert [status(w) for w in ("PASS", "Pass", "FAIL", "Fail", "SKIP", "Skip", "WARN", "Warn")] == \
        ["pass", "pass", "fail", "fail", "skip", "skip", "warn", "warn"]
