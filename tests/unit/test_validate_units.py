"""bench validate's pure parts: references and tolerances, stragglers, JUnit XML, bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from bench.analysis import metrics, references, stragglers
from bench.core.errors import BadInput
from bench.render.junit import to_junit
from tests.conftest import assert_bad_input, cli


def test_shipped_table_loads_and_every_figure_has_a_source():
    table = references.load()
    assert table.throughput, "no reference at all"
    for r in table.throughput:
        assert r.source and r.value > 0
    t4 = table.throughput_for("Tesla T4", "fp32", "vit-b16-224", 64)
    # The study's 1817.65 s per 50,000-image epoch on one T4.
    assert t4 is not None and t4.value == pytest.approx(50000 / 1817.65, abs=0.01)
    assert table.throughput_for("NVIDIA Tesla T4", "fp32", "vit-b16-224", 64) == t4  # names as NVML prints them
    assert table.throughput_for("Tesla T4", "fp16", "vit-b16-224", 64) is None
    assert table.relative.fail_lower <= table.relative.warn_lower <= 0


def test_judge_is_reframes_lower_upper_fractions():
    assert references.judge(80, 100, -0.3, None) == ("PASS", pytest.approx(-0.2))
    assert references.judge(69, 100, -0.3, None)[0] == "FAIL"
    assert references.judge(160, 100, -0.3, 0.5)[0] == "FAIL"
    assert references.judge(1e9, 100, None, None)[0] == "PASS"


def test_judge_relative_warns_then_fails_and_honours_the_floor():
    tol = references.Relative(warn_lower=-0.35, fail_lower=-0.65, floor=10.0)
    assert references.judge_relative(100, 100, tol)[0] == "PASS"
    assert references.judge_relative(60, 100, tol)[0] == "WARN"
    assert references.judge_relative(30, 100, tol)[0] == "FAIL"
    assert references.judge_relative(9, 9.5, tol)[0] == "FAIL"  # near the median, below the floor


@pytest.mark.parametrize("text,needle", [
    ("{", "not JSON"),
    ('{"throughput": [{"gpu": "T4"}]}', "throughput[0]: missing or bad field"),
    ('{"relative": {"warn_lower": -0.9, "fail_lower": -0.1}}', "relative: need -1 <= fail_lower"),
    ('{"throughput": [{"gpu": "T4", "precision": "fp32", "model": "m", "micro_batch": 1, '
     '"images_per_s": 0, "source": "x"}]}', "images_per_s must be > 0"),
])
def test_bad_reference_files_are_named(tmp_path, text, needle):
    path = tmp_path / "refs.json"
    path.write_text(text)
    with pytest.raises(BadInput) as e:
        references.load(str(path))
    assert str(e.value).startswith(str(path)) and needle in str(e.value)


def test_stragglers_by_hand():
    alone = {("n1", 0): 0.10, ("n1", 1): 0.11, ("n2", 0): 0.30}
    g = stragglers.from_slots("gpu", alone)
    assert (g.kind, g.host, g.slot, g.exclude) == ("gpu", "n2", 0, "n2:0")
    assert g.cost == pytest.approx(1 - 0.11 / 0.30) == pytest.approx(metrics.straggler_cost(alone))
    assert "alone" in g.reason
    r = stragglers.from_slots("rank", {("a", 0): 0.2, ("a", 1): 0.2, ("c", 1): 0.5})
    assert (r.kind, r.host, r.slot, r.exclude) == ("rank", "c", 1, "c:1") and r.cost == pytest.approx(0.6)
    # A link: modelled step = compute + one all-reduce of the gradients at the node's bus bandwidth.
    link = stragglers.from_links({"a": 1e9, "b": 1e9, "c": 1e5}, grad_bytes=1e6, t_compute_s=0.1, n=3)
    slow = 0.1 + 1e6 * 2 * 2 / 3 / 1e5
    fast = 0.1 + 1e6 * 2 * 2 / 3 / 1e9
    assert link.host == "c" and link.cost == pytest.approx(1 - fast / slow)
    found = stragglers.find(gpu_step_s={("a", 0): 0.2, ("b", 0): 0.2, ("c", 0): 0.21}, rank_compute_s=alone,
                            node_busbw={"a": 1e9, "b": 1e9, "c": 1e5}, grad_bytes=1e6, n=3)
    assert [s.kind for s in found] == ["link", "rank", "gpu"]  # costliest first
    assert stragglers.find(gpu_step_s={("a", 0): 0.1}) == []


def test_junit_has_one_testcase_per_check_with_failures_and_skips():
    checks = [
        {"check": "preflight", "node": "n1", "status": "PASS", "value": "ok", "reference": "", "reason": ""},
        {"check": "preflight", "node": "n2", "status": "FAIL", "value": "", "reference": "",
         "reason": "unreachable (ssh: <connect> & \"refused\")"},
        {"check": "bandwidth", "node": "n2", "status": "SKIP", "value": "", "reference": "", "reason": "excluded"},
        {"check": "stragglers", "node": "cluster", "status": "WARN", "value": "", "reference": "", "reason": "slow"},
    ]
    root = ET.fromstring(to_junit(checks, duration_s=1.5))
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 4 and len({c.get("name") for c in cases}) == 4
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "1")
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["preflight [n2]"]
    assert failed[0].find("failure").get("message") == checks[1]["reason"]  # escaped by the writer, read back whole
    assert cases[2].find("skipped") is not None and "WARN" in cases[3].find("system-out").text


def test_without_a_hostfile_or_an_allocation_validate_checks_this_node_and_a_launcher_needs_one(monkeypatch):
    from bench.cluster.hostfile import HostSelection
    from bench.validate.config import ValidateConfig
    from bench.validate.where import where

    for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    w = where(ValidateConfig(), HostSelection())
    assert w.launcher == "local" and list(w.resources) == ["localhost"]
    assert w.hostfile_text == f"localhost slots={len(w.resources['localhost'])}\n"
    assert_bad_input(cli("validate", "--launcher", "pdsh"), "--launcher pdsh")
    # Inside an allocation (not a prolog), the allocation is the cluster; in a prolog it is not.
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    assert where(ValidateConfig(level="prolog"), HostSelection()).launcher == "local"


def test_prolog_takes_no_hostfile(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n")
    assert_bad_input(cli("validate", "--level", "prolog", "--hostfile", str(hf)), "--level prolog")


def test_checks_must_be_known(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n")
    assert_bad_input(cli("validate", "--hostfile", str(hf), "--checks", "throughput,bandwith"), "--checks",
                     "'bandwith'")


def test_validate_names_a_bad_reference_file(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n")
    bad = tmp_path / "refs.json"
    bad.write_text(json.dumps({"relative": {"warn_lower": 0.5, "fail_lower": -0.5}}))
    assert_bad_input(cli("validate", "--hostfile", str(hf), "--reference", str(bad), "--out", str(tmp_path / "o")),
                     str(bad))
    assert_bad_input(cli("validate", "--hostfile", str(hf), "--reference", str(tmp_path / "nope.json"),
                           "--out", str(tmp_path / "o")), "--reference")
