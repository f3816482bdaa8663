"""Every script in benchmarks/ at its smallest size (`--smoke`), so none can rot between the runs that measure.

Each runs as a person runs it, a process of its own from the checkout's root: it must exit 0, say that it is a
smoke run, and print its table (or JSON) with a row for each of its arms. The figures themselves are not
checked: one step of the smallest model measures nothing (timings belong in benchmarks/README.md). The scripts
that need namespace hosts are tests/multihost/test_benchmarks_smoke.py's; hub_scale.py, gpu-check.sh and
make-gpu-wheels.sh have their own tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

NUM = r"[\d.]+"
TP = rf"{NUM} MB\s+{NUM}"
SMOKE = "# SMOKE RUN (--smoke)"


def _rows(*arms: str, shape: str) -> list[str]:
    return [shape.format(arm=re.escape(a)) for a in arms]


# script -> the lines (regular expressions, each matched at a line's start) its smoke run must print.
EXPECTED: dict[str, list[str]] = {
    "bare_loop": [
        *_rows("bench", "noclip", "bare", "timm", shape=rf"\s+{{arm}}: median\s+{NUM} img/s"),
        rf"# profile \(self time per step, ms\): bench {NUM}",
        r"  bench's own parts, last block \(ms/step\): data ",
        *_rows("bench", "noclip", shape=rf"  ratio {{arm}}/bare \(median of paired rounds\): {NUM} wall clock"),
        rf"bare_loop: bench/bare = {NUM} wall clock, {NUM} CPU time; .*: not judged \(smoke run\)$"],
    "data_path": [
        *_rows("device", "dataloader", shape=rf"\s+{{arm}}: production\s+{NUM} img/s; in training: data"),
        rf"  training ratio device/dataloader \(median of paired rounds\): {NUM}",
        rf"data_path: device data share {NUM}% .*: not judged \(smoke run\)$"],
    "ddp_vs_deepspeed": [
        *_rows("ddp", "ddp-fused", "ds-plain", "z0", "z0-quiet", "z1", "z2", "z2-overlap",
               shape=rf"\s+{{arm}}: median\s+{NUM} img/s"),
        rf"  ratio z2-overlap/ddp-fused: {NUM}",
        r"ddp_vs_deepspeed: best bench config \S+ / ddp = .*: not judged \(smoke run\)$"],
    "engines": _rows("ddp", "fsdp2", "zero3", "fsdp2-keep", "zero2",
                     shape=rf"{{arm}}\s+{NUM}\s+{NUM}\s+{NUM} MB\s+{NUM} MB$"),
    "parallel": [  # each arm's split of the global batch of 8 on 2 ranks; tensor parallelism's own columns
        *(rf"{arm}\s+{split}\s+{micro}\s+{NUM}\s+{NUM}\s+{NUM} MB\s+{tp}\s+{NUM} MB\s+{NUM} MiB$"
          for arm, split, micro, tp in (("fsdp2", "1x1x2", "4 x 1", r"-\s+-"), ("tp2", "2x1x1", "8 x 1", TP),
                                        ("autotp2", "2x1x1", "8 x 1", TP), ("pipeline", "1x2x1", "4 x 2", r"-\s+-")))],
    "history_drift": [  # the drift test over 40 of Longhorn's V100s (../shared/fixtures/fleets), and shuffled
        rf"sgemm-longhorn-agg.csv\s+40\s+\d+\s+\d+\s+{NUM}\s+\d+\s+{NUM}\s+{NUM}%\s+\d+/40\s+\d+/40",
        r"shuffled \(every alarm false\): \d+ of 40 GPU histories alarmed",
        rf"all: 40 GPUs, \d+ nightly tests: \d+ alarm\(s\) on \d+ GPU\(s\) = {NUM} per 1,000 GPUs"],
    "history_store": [rf"\s+{n}\s+{8 * n}\s+\d+\s+10\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$" for n in (1, 10)],
    "launcher_startup": _rows("deepspeed runner + launch.py", "deepspeed launch.py", "bench.launch.node",
                              shape=rf"{{arm}}\s+median\s+{NUM} s\s+\(min {NUM}, max {NUM}, 1 rounds\)"),
    "comm_groups": _rows("before", "after", "world-barrier", shape=rf"\s+4\s+{{arm}}\s+{NUM}\s+{NUM}\s+{NUM}\s+\d+\s+2 "),
    "fleet_replay": [
        r"resnet-ls6-agg\.csv\s+quick\s+219\s+73\s", r"all GPU sets at quick: \d+ of \d+ healthy GPUs flagged",
        r"example-cluster01\s+1 alltoall_perf\s+the logs: none of 45 pairs short",
        r"example-cluster01\s+1 alltoall_perf\s+quick", r"example-cluster01\s+1 alltoall_perf\s+full",
        rf"fleet_replay: 1 GPU replays, 2 pair replays in {NUM} s: not judged \(smoke run\)$"],
    "validate_scale": [
        *(rf"{level}\s+{n} nodes\s+{8 * n} GPUs: whole\s+{NUM} s, .* = the planted ones, exit {int(n > 1)}"
          for level in ("quick", "full") for n in (1, 10)),
        *_rows("quick wall s", "quick CPU s", "full wall s", "full CPU s", shape=r"{arm}\s+8\s+80\s+x10 to 80"),
        # every stage bench runs has its row: a list of them copied into the script missed the copies stage
        *_rows("copies", "memory", "burn", "rails", "inter-node", "whole", shape=rf"{{arm}}\s+{NUM}\s+{NUM}\s")],
}


def smoke(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, os.path.join("benchmarks", f"{script}.py"), "--smoke", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def missing_lines(stdout: str, expected: list[str]) -> list[str]:
    """The expected lines (regular expressions) that no line of stdout starts with."""
    lines = stdout.splitlines()
    return [e for e in expected if not any(re.match(e, line) for line in lines)]


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_smoke_run_prints_its_table(script):
    out = smoke(script).stdout
    assert out.startswith(SMOKE), out[:500]
    assert missing_lines(out, EXPECTED[script]) == [], out[-4000:]


def test_timm_train_bench_smoke_run_prints_one_json_line_marked_smoke():
    out = smoke("timm_train_bench").stdout
    rec = json.loads(out)  # one JSON document and nothing else: gpu-check.sh reads it so
    assert rec["smoke"] is True and "SMOKE RUN" in rec["what"]
    assert rec["device"] == "cpu" and rec["images_per_s"] > 0 and rec["flops_per_image"] > 0
