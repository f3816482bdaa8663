"""The command line: bad input is one line and exit 2; --help is fast and torch-free."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import assert_bad_input, cli


@pytest.mark.process
def test_help_imports_no_torch():
    code = ("import sys, runpy; sys.argv=['bench','--help']\n"
            "try:\n    runpy.run_module('bench', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "heavy=[m for m in ('torch','deepspeed','timm','torchvision','numpy') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in out.stdout, out.stdout[-500:] + out.stderr[-2000:]
    assert "run" in out.stdout and "hosts" in out.stdout


def test_run_help_lists_generated_options():
    proc = cli("run", "--help-all")
    assert proc.returncode == 0
    for opt in ("--micro-batch", "--zero-stage", "--precision", "--deepspeed-config", "--dry-run", "--hostfile"):
        assert opt in proc.stdout
    short = cli("run", "--help").stdout
    assert "--zero-stage" in short and "--deepspeed-config" not in short
    assert "more options: bench run --help-all" in short


@pytest.mark.parametrize("args,needle", [
    (["--model", "no_such_model_xyz"], "--model"),
    (["--micro-batch", "0"], "--micro-batch"),
    (["--micro-batch", "-3"], "--micro-batch"),
    (["--micro-batch", "x"], "--micro-batch"),
    (["--zero-stage", "4"], "--zero-stage"),
    (["--steps", "10", "--epochs", "1"], "--steps"),
    (["--precision", "fp8"], "--precision"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--offload", "--zero-stage", "0"], "--offload"),
    (["--dataset-fraction", "0"], "--dataset-fraction"),
    (["--lr", "-1"], "--lr"),
    (["--gpus", "0"], "--gpus"),
    (["--grad-accum", "0"], "--grad-accum"),
    (["--steps", "3", "--timing-warmup", "5"], "--timing-warmup"),
    (["--deepspeed-config", "/nonexistent/ds.json"], "--deepspeed-config"),
    (["--no-such-option"], "unrecognized"),
    (["--include", "localhost:0"], "--include"),
    (["--launcher", "pdsh"], "--launcher"),
    (["--out", "/proc/version/results", "--dataset", "synthetic"], "--out"),
    (["--dataset", "cifar10", "--data-dir", "/nonexistent-data"], "--data-dir"),
])
def test_bad_run_input_is_one_line_exit_2(args, needle):
    assert_bad_input(cli(*args, timeout=60), needle)


def test_bad_user_deepspeed_json(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text('{"zero_optimization": {"stage": 1},\n "train_batch_size": }')
    assert_bad_input(cli("--dataset", "synthetic", "--deepspeed-config", str(bad), timeout=60), f"{bad}:2")


def test_dry_run_prints_config_ds_json_and_command(tmp_path):
    proc = cli("--dry-run", "--dataset", "synthetic", "--zero-stage", "2", "--precision", "bf16",
                 "--out", str(tmp_path / "r"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    import json
    doc = json.loads(proc.stdout)
    assert doc["config"]["zero_stage"] == 2
    assert doc["deepspeed_config"]["bf16"] == {"enabled": True}
    assert doc["deepspeed_config"]["zero_optimization"]["stage"] == 2
    # bench's node launcher with two CPU slots: no DeepSpeed runner, no launch.py
    assert "bench.launch.node --world-info=" in doc["command"]
    assert "deepspeed.launcher" not in doc["command"]
    assert not (tmp_path / "r").exists()  # a dry run launches and writes nothing


def test_a_dry_run_needs_no_data_set_and_says_the_run_would_refuse_it(tmp_path):
    proc = cli("run", "--dry-run", "--zero-stage", "2", cwd=str(tmp_path))   # no ./data here
    assert proc.returncode == 0, proc.stderr
    import json
    data = json.loads(proc.stdout)["data"]
    assert data["ready"] is False and "--data-dir" in data["why"] and "the run refuses it" in data["why"]
    assert_bad_input(cli("run", "--zero-stage", "2", cwd=str(tmp_path)), "--data-dir")   # the run itself refuses
