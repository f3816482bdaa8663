"""What a person reads of bench validate: the one line names the port, the DCGM test and the GPU a health finding is
about; a check outside the level, and --drain/--resume where no Slurm is, are refused before any work."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import assert_bad_input, cli
from tests.health_fixtures import HEALTH as FIXTURES


def _one_line(tmp_path, name: str, saved_as: str) -> str:
    node = tmp_path / "node7"
    node.mkdir()
    shutil.copy(FIXTURES / name, node / saved_as)
    proc = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    return line


@pytest.mark.parametrize("name, saved_as, named", [
    ("ibstat_12-hca_3-ports-down-disabled.txt", "ibstat.txt", ("mlx5_2/1", "mlx5_7/1", "mlx5_8/1")),
    ("dcgmi-diag_dcgm4.2.3_l40s-x4_pcie-fail-internal-error.txt", "dcgmi-diag.txt", ("pcie",)),
    ("nvidia-smi-a-i0_unable-to-determine-device-handle_unknown-error.txt", "nvidia-smi.txt", ("0000:09:00.0",)),
])
def test_the_one_line_names_what_each_finding_is_about_and_its_meaning_once(tmp_path, name, saved_as, named):
    line = _one_line(tmp_path, name, saved_as)
    assert line.startswith("bench validate health: FAIL: health node7: "), line
    for what in named:
        assert what in line, (what, line)
    assert line.count("action:") == 1, "one code, its meaning and action once"


def test_a_check_outside_the_level_is_bad_input_naming_the_levels_checks():
    assert_bad_input(cli("validate", "--level", "health", "--checks", "throughput"), "--checks", "'throughput'",
                     "--level health", "health")
    assert_bad_input(cli("validate", "--level", "prolog", "--checks", "training"), "--checks", "numerics")


def test_drain_and_resume_without_slurm_say_so_before_any_work(tmp_path, monkeypatch):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1 slots=1\n")
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}  # no scontrol on it
    for option in ("--undrain", "--drain"):
        proc = cli("validate", option, "--hostfile", str(hosts), "--out", str(tmp_path / "out"), env=env)
        assert_bad_input(proc, option, "scontrol is not on PATH")
        assert not (tmp_path / "out").exists(), "refused before a run folder"
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "scontrol").chmod(0o755)
    proc = cli("validate", "--undrain", "--hostfile", str(hosts), env={**env, "SLURM_CONF": str(tmp_path / "nope")})
    assert_bad_input(proc, "--undrain", "SLURM_CONF=")


def test_the_old_name_of_undrain_still_works_and_says_so_once(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1 slots=1\n")
    proc = cli("validate", "--resume", "--resume", "--hostfile", str(hosts), "--out", str(tmp_path / "out"),
               env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert proc.returncode == 2 and proc.stderr.count("--resume is now --undrain") == 1, proc.stderr
    assert "error: --undrain: " in proc.stderr


def _roce_node(text: str) -> str:
    """The recorded 12-HCA ibstat as a RoCE node: its ConnectX-7 (MT4129) ports relabelled Ethernet, its ConnectX-6 Dx
    (MT4125) frontend ports brought up at 100 Gb/s (derived from the recording, as issue 41 item 6(a) describes)."""
    out, ca_type = [], None
    for line in text.splitlines():
        if "CA type:" in line:
            ca_type = line.split(":", 1)[1].strip()
        if "Link layer:" in line:
            line = line.replace("InfiniBand", "Ethernet")
        if ca_type == "MT4125" and "Rate:" in line:
            line = line.split(":")[0] + ": 100"
        if ca_type == "MT4125" and ("State:" in line and "Physical" not in line):
            line = line.split(":")[0] + ": Active"
        if ca_type == "MT4125" and "Physical state:" in line:
            line = line.split(":")[0] + ": LinkUp"
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_port_is_judged_slow_beside_ports_of_its_own_ca_type_only():
    from bench.cluster.health.infiniband import port_findings
    from bench.cluster.interconnect import parse_ibstat

    text = _roce_node((FIXTURES / "ibstat_12-hca_3-ports-down-disabled.txt").read_text())
    ports = parse_ibstat(text)
    kinds = {(p["ca_type"], p["rate_gbps"]) for p in ports if p["state"] == "Active"}
    assert kinds == {("MT4129", 400.0), ("MT4125", 100.0)} and {p["link_layer"] for p in ports} == {"Ethernet"}
    assert [f for f in port_findings(ports) if f["code"] == "ib-port-slow"] == [], "another card is no slower peer"
    one_slow = text.replace("Rate: 100", "Rate: 40", 1)
    slow = [f for f in port_findings(parse_ibstat(one_slow)) if f["code"] == "ib-port-slow"]
    assert len(slow) == 1 and "MT4125" in slow[0]["what"] and "100 Gb/s" in slow[0]["what"], slow
