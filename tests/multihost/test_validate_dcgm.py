"""DCGM on its own clock across real hosts (issue 47 item 2): level 2 taking 120 s on one of three hosts does not
make the others unknown, and its own row says why: over ssh (one per host), and inside a Slurm allocation where
one srun step reaches all three (the old way, one launch, would have lost all three to the slow one).

No DCGM package can be installed here, so each host gets a stand-in dcgmi on its PATH (host_mounts.on_path: that
host alone sees it) which replays DCGM 3.1.0's recorded `dcgmi diag -j` output (all pass, 8 GPUs;
tests/fixtures/health/SOURCES.md) after a given time. The slow host's stand-in takes 120 s, NVIDIA's documented
length of level 2; the two others answer in 2 s, faster than a real level 2, since what matters is only that they
answer within the timeout. The run gives level 2 a --dcgm-timeout of 15 s (its default is 240 s), so the test
waits 15 s, not 120: the health level launches no ranks, so the stage's clock is nearly the whole run."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest

from bench.core import results

from tests.conftest import REPO, one_json

from .host_mounts import on_path
from .validate_runs import row, run_validate, said

pytestmark = [pytest.mark.multihost]

RECORDED = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "health",
                        "dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt")
TIMEOUT_S = 15


def _stand_in(folder, seconds: int):
    folder.mkdir(parents=True)
    exe = folder / "dcgmi"
    exe.write_text(f"#!/bin/sh\n# vitbench test stand-in for dcgmi (no DCGM here): {folder}\nsleep {seconds}\n"
                   f"cat {os.path.abspath(RECORDED)}\n")
    exe.chmod(0o755)
    return folder


def _still_running(marker: str) -> list[int]:
    """PIDs whose command line names marker (the namespace hosts share this machine's PID space)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"):
                found.append(int(pid))
    return found


def test_level_2_running_long_on_one_host_leaves_it_unknown_and_the_others_judged(own_hosts, tmp_path):
    c = own_hosts
    slow = c.hosts[1]
    with contextlib.ExitStack() as hosts:
        for h in c.hosts:
            hosts.enter_context(on_path(c, h, _stand_in(tmp_path / f"bin-{h}", 120 if h == slow else 2)))
        v = run_validate(c, tmp_path, "--level", "health", "--dcgm", "2", "--dcgm-timeout", str(TIMEOUT_S))
        left = _still_running(str(tmp_path / f"bin-{slow}"))
    rec = v.rec
    assert rec is not None, v.proc.stderr[-3000:]
    results.validate(rec)
    assert not left, f"the slow host's dcgmi was not killed on its node: {left}"
    mine = row(rec, "dcgm", slow)
    assert mine["status"] == "ERROR", said([mine])
    assert mine["reason"].startswith(f"unknown: DCGM level 2 did not finish in {TIMEOUT_S} s"), mine["reason"]
    for h in c.hosts:
        if h != slow:
            theirs = row(rec, "dcgm", h)
            assert theirs["status"] == "PASS" and "dcgmi diag -r 2:" in theirs["value"], said([theirs])
    assert {h: n["verdict"] for h, n in rec["nodes"].items()} == {h: "unknown" if h == slow else "healthy"
                                                                  for h in c.hosts}, rec["nodes"]
    assert v.proc.returncode == 3
    dcgm_s = next(s["duration_s"] for s in rec["stages"] if s["stage"] == "dcgm")
    assert TIMEOUT_S <= dcgm_s < 120, "the stage waited for the slow host's 120 s"


def test_through_one_srun_step_the_slow_node_is_unknown_and_the_others_judged(slurm, tmp_path):
    """The same inside an allocation (the allocation is the cluster, --launcher slurm): srun passes the job's PATH
    to its tasks, so the stand-in is first on PATH here and takes its time by the host it runs on."""
    slow = slurm.nodes[1]
    folder = tmp_path / "bin"
    folder.mkdir()
    exe = folder / "dcgmi"
    exe.write_text(f"#!/bin/sh\n# vitbench test stand-in for dcgmi (no DCGM here)\n"
                   f"if [ \"$(hostname)\" = {slow} ]; then sleep 120; else sleep 2; fi\n"
                   f"cat {os.path.abspath(RECORDED)}\n")
    exe.chmod(0o755)
    env = dict(slurm.env, PATH=f"{folder}{os.pathsep}{slurm.env['PATH']}")
    proc = slurm.run_in_allocation(["--ntasks-per-node=1", sys.executable, "-m", "bench", "validate", "--level",
                                    "health", "--launcher", "slurm", "--dcgm", "2", "--dcgm-timeout", str(TIMEOUT_S), "--json", "--out",
                                    str(tmp_path / "results")], nodes=3, cwd=REPO, timeout=300, env=env)
    rec = one_json(proc.stdout) if proc.stdout.strip() else None
    assert rec is not None, proc.stderr[-3000:]
    results.validate(rec)
    assert rec["launcher"] == "slurm"
    mine = row(rec, "dcgm", slow)
    assert mine["status"] == "ERROR" and mine["reason"].startswith(
        f"unknown: DCGM level 2 did not finish in {TIMEOUT_S} s"), said([mine])
    assert {n: row(rec, "dcgm", n)["status"] for n in slurm.nodes if n != slow} == \
        {n: "PASS" for n in slurm.nodes if n != slow}
    assert {h: n["verdict"] for h, n in rec["nodes"].items()} == {n: "unknown" if n == slow else "healthy"
                                                                  for n in slurm.nodes}, rec["nodes"]
    assert not _still_running(str(folder)), "the slow node's dcgmi was not killed"
