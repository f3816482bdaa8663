"""One vocabulary across commands (issue 54 item 4): every command that launches has --dry-run; the launchers,
DCGM levels, timeouts and strategies are spelled the same wherever an option takes them. In-process, no launch."""

from __future__ import annotations

import argparse
import json

import pytest

from tests.conftest import assert_bad_input, cli
from tests.unit.test_help import subparsers

LAUNCHING = ("run", "comm", "validate", "sweep", "tune")


@pytest.mark.parametrize("command", LAUNCHING)
def test_every_command_that_launches_has_dry_run(command):
    assert any("--dry-run" in a.option_strings for a in subparsers()[command]._actions)


def test_tune_and_comm_dry_runs_plan_and_launch_nothing(tmp_path):
    tune = cli("tune", "--dry-run", "--dataset", "synthetic", "--strategies", "2+offload,zero1", "--out",
               str(tmp_path / "r"))
    assert tune.returncode == 0, tune.stderr
    # The zero suite's spelling (2+offload) is tune's strategy (zero2+offload).
    assert json.loads(tune.stdout)["options"]["strategies"] == ["zero2+offload", "zero1"]
    comm = cli("comm", "--dry-run", "--sizes", "1K:4K", "--timeout", "2m", "--out", str(tmp_path / "r"))
    assert comm.returncode == 0, comm.stderr
    doc = json.loads(comm.stdout)
    assert doc["sizes"] == [1024, 2048, 4096] and doc["config"]["timeout"] == 120.0 and doc["world_size"] >= 1
    assert not (tmp_path / "r").exists()


def test_the_launcher_choices_are_run_s_everywhere():
    from bench.core.config import LAUNCHERS

    for command in ("run", "comm", "sweep", "tune", "probe", "validate"):
        action = next(a for a in subparsers()[command]._actions if "--launcher" in a.option_strings)
        assert set(action.choices) - {"ssh"} == set(LAUNCHERS), command


def test_dcgm_levels_are_spelled_alike_in_probe_and_validate():
    def choices(command):
        return next(a for a in subparsers()[command]._actions if "--dcgm" in a.option_strings).choices

    assert set(choices("probe")) == set(choices("validate")) - {"auto"}
    assert_bad_input(cli("probe", "--local", "--dcgm", "1"), "--dcgm: reads a node's health")


@pytest.mark.parametrize("command,flag", [("run", "--timeout"), ("comm", "--timeout"), ("validate", "--timeout"),
                                          ("validate", "--dcgm-timeout"), ("probe", "--probe-timeout"),
                                          ("run", "--collective-timeout")])
def test_every_timeout_takes_seconds_or_units(command, flag):
    action = next(a for a in subparsers()[command]._actions if flag in a.option_strings)
    assert action.type("90") == 90.0 and action.type("1m30s") == 90.0 and action.type("5m") == 300.0
    with pytest.raises(argparse.ArgumentTypeError):
        action.type("soon")


def test_validate_accepts_the_local_launcher_as_run_does(tmp_path):
    proc = cli("validate", "--launcher", "local", "--dry-run", "--json", "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["launch"]["launcher"] == "local"
    (tmp_path / "hosts").write_text("node1 slots=1\n")
    assert_bad_input(cli("validate", "--launcher", "local", "--hostfile", str(tmp_path / "hosts"), "--dry-run"),
                     "--launcher local: checks this node alone")
