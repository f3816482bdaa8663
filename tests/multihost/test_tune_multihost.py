"""`bench tune` across the 3 namespace hosts: every trial runs through the launcher given on the command line."""

from __future__ import annotations

import json

import pytest

from bench.analysis.tune import validate_doc
from bench.core import results
from tests.conftest import FAST, bench

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def test_tune_uses_the_launcher_given(cluster, tmp_path):
    out = tmp_path / "out"
    proc = bench("tune", "--hostfile", str(cluster.hostfile), "--launcher", "openmpi", "--dataset", "synthetic",
                 *FAST, "--no-eval", "--strategies", "zero1", "--gpu-counts", "3", "--micro-batches", "16",
                 "--trial-steps", "4", "--budget", "1", "--out", str(out), env=cluster.env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    doc = json.loads((out / "tune" / "tune.json").read_text())
    validate_doc(doc)
    (rec,) = results.read(str(out / "tune" / "results.jsonl")).records
    # The trial ran where and how the user said: mpirun over the three hosts, one rank each.
    assert rec["status"] == "ok" and rec["plan"]["launcher"] == "openmpi"
    assert rec["plan"]["resources"] == {h: [0] for h in cluster.hosts}
    assert rec["provenance"]["hosts"] == cluster.hostnames
    # And the command that reproduces it keeps the launcher and the hostfile.
    argv = doc["argv"]
    assert argv[argv.index("--launcher") + 1] == "openmpi"
    assert argv[argv.index("--hostfile") + 1] == str(cluster.hostfile)
