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
    for option in ("--resume", "--drain"):
        proc = cli("validate", option, "--hostfile", str(hosts), "--out", str(tmp_path / "out"), env=env)
        assert_bad_input(proc, option, "scontrol is not on PATH")
        assert not (tmp_path / "out").exists(), "refused before a run folder"
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "scontrol").chmod(0o755)
    proc = cli("validate", "--resume", "--hostfile", str(hosts), env={**env, "SLURM_CONF": str(tmp_path / "nope")})
    assert_bad_input(proc, "--resume", "SLURM_CONF=")
