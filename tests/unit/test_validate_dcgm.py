"""DCGM on its own clock (issue 47 item 2): `dcgmi diag` under a deadline that kills what it started, and the
dcgm stage's rows: a node past its time is unknown and says so, the others' results stand. No DCGM package can be
installed here: the dcgmi below is a stand-in script that replays a recorded output (DCGM 3.1.0's all-pass JSON,
tests/fixtures/health/SOURCES.md) after a delay; tests/multihost/test_validate_dcgm.py runs it on namespace hosts."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench.cluster.accel.nvidia import dcgm

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "health"
ALL_PASS = HEALTH / "dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt"


def _stand_in(tmp_path: Path, delay_s: float) -> Path:
    """A dcgmi first on PATH that replays ALL_PASS after delay_s, and leaves its child's PID behind."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "dcgmi"
    exe.write_text(f"#!/bin/sh\nsleep {delay_s} &\necho $! > {tmp_path}/child.pid\nwait\ncat {ALL_PASS}\n")
    exe.chmod(0o755)
    return bin_dir


@pytest.mark.process
def test_dcgmi_past_its_timeout_is_killed_with_its_children_and_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path, 30)}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    d = dcgm.diag(2, 1.0)
    assert time.monotonic() - t0 < 10
    assert d.timed_out and d.text is None and d.why == "DCGM level 2 did not finish in 1 s" and d.expected
    child = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split(") ")[1][0] == "Z"


@pytest.mark.process
def test_dcgmi_within_its_timeout_gives_its_json_and_its_seconds(tmp_path, monkeypatch):
    from bench.cluster.dcgm_node import node_answer

    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path, 0.3)}{os.pathsep}{os.environ['PATH']}")
    a = node_answer(2, 20.0)
    assert not a["timed_out"] and a["installed"] and 0.3 <= a["seconds"] < 20
    assert a["report"]["read"]["dcgm"].startswith("dcgmi diag -r 2: ") and a["report"]["findings"] == []


def test_the_documented_lengths_and_their_timeouts():
    assert dcgm.DOCUMENTED_S == {1: 60.0, 2: 120.0, 3: 900.0}
    assert [dcgm.timeout_for(n) for n in (1, 2, 3)] == [120.0, 240.0, 1800.0]


# --------------------------------------------------------------------------- the stage's rows
def _answer(host: str, seconds: float, timed_out: bool = False, table: str | None = None) -> dict:
    from bench.cluster.health.report import Report

    r = Report(host, None)
    if timed_out:
        r.not_read("dcgm", "DCGM level 2 did not finish in 240 s", True)
    elif table:
        results = dcgm.parse_table((HEALTH / table).read_text())
        r.add(dcgm.findings(results))
        r.read_ok("dcgm", f"dcgmi diag -r 2: {len(results)} test result(s)")
    else:
        dcgm.report_into(r, 2, ALL_PASS.read_text(), None, True)
    return {"hostname": host, "level": 2, "timeout_s": 240.0, "seconds": seconds, "timed_out": timed_out,
            "installed": True, "report": r.done()}


def _stage(monkeypatch, dcgm_opt: str, answers: dict, unreached: dict, with_dcgmi=("n1", "n2", "n3", "n4")):
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import dcgm as stage
    from bench.validate import verdicts
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    hosts = ["n1", "n2", "n3", "n4"]
    v = Validation(ValidateConfig(dcgm=dcgm_opt), HostSelection(), {h: [0, 1] for h in hosts}, references.load(),
                   "/nonexistent")
    v.inventory = {h: {"dcgmi": "/usr/bin/dcgmi" if h in with_dcgmi else None} for h in hosts}
    asked = {}

    def diagnose_all(via, hosts_, level, timeout, wait, container_exec=None):
        asked.update(hosts=hosts_, level=level, timeout=timeout, wait=wait)
        return ({h: a for h, a in answers.items() if h in hosts_}, {h: w for h, w in unreached.items() if h in hosts_})

    monkeypatch.setattr(stage, "diagnose_all", diagnose_all)
    stage.dcgm(v)
    return v, asked, verdicts.node_verdicts(v.checks, v.resources)


def test_a_node_past_its_time_is_unknown_with_its_reason_and_the_others_stand(monkeypatch):
    answers = {"n1": _answer("n1", 118.0), "n2": _answer("n2", 240.0, timed_out=True),
               "n3": _answer("n3", 121.0, table="dcgmi-diag-r2_gpu-memory-fail-thermal-violation_excerpt.txt")}
    v, asked, nodes = _stage(monkeypatch, "2", answers, {"n4": "timeout after 270s"})
    assert asked["level"] == 2 and asked["timeout"] == 240.0 and asked["wait"] > 240.0
    rows = {c.node: c for c in v.checks if c.check == "dcgm"}
    assert rows["n2"].status == "ERROR"
    assert rows["n2"].reason.startswith("unknown: DCGM level 2 did not finish in 240 s")
    assert rows["n1"].status == "PASS" and "in 118 s" in rows["n1"].value
    assert rows["n3:0"].status == "FAIL" and "dcgm-fail" in rows["n3:0"].value, rows
    assert rows["n4"].status == "ERROR" and "gave no answer" in rows["n4"].reason
    assert {h: n["verdict"] for h, n in nodes.items()} == {"n1": "healthy", "n2": "unknown", "n3": "drain",
                                                           "n4": "unknown"}
    assert nodes["n2"]["not_checked"][0]["reason"].startswith("unknown: DCGM level 2 did not finish")


def test_a_node_without_dcgmi_is_skipped_by_level_and_left_alone_by_auto(monkeypatch):
    answers = {h: _answer(h, 50.0) for h in ("n1", "n2")}
    v, asked, _ = _stage(monkeypatch, "2", answers, {}, with_dcgmi=("n1", "n2"))
    assert asked["hosts"] == ["n1", "n2"]
    rows = {c.node: c.status for c in v.checks if c.check == "dcgm"}
    assert rows == {"n1": "PASS", "n2": "PASS", "n3": "SKIP", "n4": "SKIP"}
    v, asked, _ = _stage(monkeypatch, "auto", {}, {}, with_dcgmi=())
    assert not asked and not [c for c in v.checks if c.check == "dcgm"]


def test_dcgm_is_its_own_stage_and_not_the_inventorys():
    from bench.cluster.hostfile import HostSelection
    from bench.analysis import references
    from bench.validate.config import ValidateConfig
    from bench.validate.health import health_request
    from bench.validate.stages import STAGES
    from bench.validate.state import Validation

    names = [n for n, _ in STAGES]
    assert names.index("health") < names.index("dcgm") < names.index("throughput")
    v = Validation(ValidateConfig(level="full"), HostSelection(), {"n1": [0]}, references.load(), "/nonexistent")
    assert health_request(v).dcgm_level is None and v.cfg.dcgm_level() == 3
