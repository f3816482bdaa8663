"""Thirty nights of a 3-host validate for bench history's tests, derived from one real validate record.

    base = recorded(tmp)                 # bench.validate.stages.validate over tests/scale_fixtures.Cluster(3)
    folders = nights(base, tmp / "results", n=30)   # a results folder per night, written by bench's own append

The one record is bench's own: a quick validate of three nodes of 8 H200s
whose launches tests/scale_fixtures.py answers from recorded real outputs
(no GPU here). Each night is that record with:
  - every GPU's and link's figure moved by its own seeded noise (0.3%, lognormal, the run-to-run spread of a
    V100's sgemm in ../shared/fixtures/fleets/gpu-variability is 0.12%, of its resnet 3.1%),
  - DRIFT_GPU's images/s lowered 0.3% a night more (9% after 30 nights, never below the night's line: its
    throughput row stays PASS, as a night's judge left it),
  - DRAINED_NODE drained (verdict drain, a throughput drain entry) on DRAIN_NIGHTS, healthy between,
  - DRAINED_NODE's driver changed from the night it is first drained again after a return (DRIVER_NIGHT).
"""

from __future__ import annotations

import copy
import os
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

DRIFT_GPU, DRAINED_NODE = "node0001:5", "node0002"
DRAIN_NIGHTS, DRIVER_NIGHT = (9, 15, 21), 15
LOSS = 0.003
START = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)
KINDS = ("gpu_images_per_s", "intra_busbw", "node_busbw", "pair_busbw")


def recorded(tmp: Path, bad: dict[str, str] | None = None) -> dict:
    """A real quick validate of three nodes (bench.validate.stages.validate; launches answered by scale_fixtures);
    bad: scale_fixtures' planted faults ({host: "slow-gpu"}), none by default."""
    import pytest

    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig
    from tests import scale_fixtures

    cluster = scale_fixtures.Cluster(3, bad=bad or {})
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        return stages.validate(ValidateConfig(level="quick", out=str(tmp / "recorded")),
                               HostSelection(hostfile=cluster.hostfile(str(tmp))))


def night(base: dict, i: int) -> dict:
    """Night i (0-based) of the thirty."""
    rec = copy.deepcopy(base)
    when = START + timedelta(days=i)
    rec["time"] = when.strftime("%Y-%m-%dT%H:%M:%S%z")
    rec["run_id"] = f"validate-{when:%Y%m%d-%H%M%S}-n{i:02d}"
    noise = random.Random(i)
    for key in KINDS:
        figs = rec["measured"].get(key) or {}
        for subject in sorted(figs):
            figs[subject] *= noise.lognormvariate(0, 0.003)
    rec["measured"]["gpu_images_per_s"][DRIFT_GPU] *= (1 - LOSS) ** i
    if i in DRAIN_NIGHTS:
        rec["nodes"][DRAINED_NODE] = {"verdict": "drain", "action": "drain: reseat or replace the GPU",
                                      "findings": [], "not_checked": []}
        rec["drain"] = [{"host": DRAINED_NODE, "gpu": 3, "check": "throughput", "reason": "made slow for the test"}]
        rec["failed_hosts"], rec["result"], rec["exit_status"], rec["status"] = [DRAINED_NODE], "FAIL", 1, "failed"
    if i >= DRIVER_NIGHT:
        rec["nodes_provenance"][DRAINED_NODE]["driver"] = "575.57.08"
    return rec


def nights(base: dict, out: Path, n: int = 30) -> list[Path]:
    """A results folder per night under out, each record appended by bench.core.results.append."""
    from bench.core import results

    folders = []
    for i in range(n):
        rec = night(base, i)
        folder = out / rec["run_id"]
        os.makedirs(folder, exist_ok=True)
        rec["run_dir"] = str(folder)
        results.append(str(folder / "results.jsonl"), rec)
        folders.append(folder)
    return folders
