"""`bench probe` across real namespace hosts: over ssh (--launcher pdsh) and over mpirun (a rank per host).

No GPU exists here, so two hosts get a vendor's tool on their PATH (host_mounts.on_path: that host alone sees it)
replaying a recorded output: the second host an `amd-smi` printing AMD's own example of `amd-smi static` on a
4x MI300A node (ROCm/amdsmi's README: a vendor example, not a certified capture; tests/fixtures/amd/SOURCES.md),
the third an `nvidia-smi` printing a real capture of `--query-gpu` on a 2x RTX 5060 Ti node
(tests/fixtures/gpu/SOURCES.md). Each answers only the command its recording is of."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

import pytest

from bench.cluster.hetero import verdict as judge
from bench.jobs.gate import accel_of
from bench.launch.plan import build, write_files
from tests.conftest import REPO, bench, one_json

from .host_mounts import on_path

pytestmark = [pytest.mark.multihost]

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOOLS = {  # tool: (the argument its recording answers, the recording)
    "amd-smi": ("static", os.path.join(FIXTURES, "amd", "amd-smi-static_mi300a-x4-apu_4cpu_driver6.9.0-rc5.txt")),
    "nvidia-smi": ("*--query-gpu=*", os.path.join(FIXTURES, "gpu", "nvidia-smi-query_rtx5060ti_x2_busid.csv")),
}


def _tool(folder, name: str):
    when, recording = TOOLS[name]
    folder.mkdir(parents=True)
    exe = folder / name
    exe.write_text(f"#!/bin/sh\n# vitbench test stand-in for {name} (no GPU here)\ncase \"$*\" in {when}) exec cat "
                   f"{recording};; esac\necho 'this stand-in answers {when} only' >&2; exit 9\n")
    exe.chmod(0o755)
    return folder


def _launch_on(cluster, host: str, inventory: dict, out) -> dict[str, dict]:
    """bench's own launch on `host` alone, as a GPU run there plans it (the verdict over its inventory names the
    backend: bench.jobs.gate.accel_of), with a stand-in rank (tests/stand_in_rank.py) where bench.worker would
    run: no GPU can run one here. {rank file: the variables its node launcher gave it}."""
    resources = {host: [0, 1]}
    lp = build(resources, "pdsh", str(out / "run"), "cuda", environ=dict(cluster.env, PYTHONPATH=REPO),
               module="tests.stand_in_rank", accel=accel_of("cuda", judge([inventory])))
    os.makedirs(out / "run")
    write_files(lp, resources, None)
    proc = subprocess.run(lp.argv, env=lp.env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {p: json.loads((out / "run" / p).read_text()) for p in sorted(os.listdir(out / "run")) if
            p.startswith("rank")}


@pytest.mark.parametrize("launcher", ["pdsh", "openmpi"])
def test_probe_lists_each_host_once(cluster, launcher, tmp_path):
    """Each host's own inventory: the first none, the second AMD (the recorded MI300As), the third NVIDIA; the
    verdict names the vendors' mix and refuses one run across them. Over ssh, a launch on the AMD host then gives
    its ranks the AMD backend's visible-devices variable (ROCR_VISIBLE_DEVICES) and no other vendor's."""
    cpu, amd, nv = cluster.hosts
    with contextlib.ExitStack() as hosts:
        hosts.enter_context(on_path(cluster, amd, _tool(tmp_path / "amd", "amd-smi")))
        hosts.enter_context(on_path(cluster, nv, _tool(tmp_path / "nv", "nvidia-smi")))
        proc = bench("probe", "--hostfile", str(cluster.hostfile), "--launcher", launcher, "--json",
                     env=cluster.env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = one_json(proc.stdout)
        nodes = {n["host"]: n for n in doc["nodes"]}
        ranks = _launch_on(cluster, amd, nodes.get(amd, {}), tmp_path) if launcher == "pdsh" else None
    assert [n["host"] for n in doc["nodes"]] == cluster.hosts
    # Each inventory came from its own host (its own UTS hostname and address).
    assert [n["hostname"] for n in doc["nodes"]] == cluster.hostnames
    assert doc["unreachable"] == {}
    assert nodes[cpu]["gpus"] == []
    assert [(g["name"], g["vendor"], g["gfx"]) for g in nodes[amd]["gpus"]] == [("MI300A", "amd", None)] * len(
        nodes[amd]["gpus"]) and nodes[amd]["gpus"], nodes[amd]
    assert nodes[amd]["gpu_source"] == "amd-smi" and nodes[amd]["driver_version"] == "6.9.0-rc5+", nodes[amd]
    assert {g["name"] for g in nodes[nv]["gpus"]} == {"NVIDIA GeForce RTX 5060 Ti"}, nodes[nv]
    v = doc["verdict"]
    findings = {f["code"]: f for f in v["findings"]}
    assert v["level"] == "fail" and v["uniform"] is False and v["gpu_hosts"] == [amd, nv], v
    mixed = findings["vendor-mixed"]
    assert mixed["level"] == "fail" and f"AMD on {amd}; NVIDIA on {nv}" in mixed["message"], mixed
    assert findings["no-gpu"]["hosts"] == [cpu], findings["no-gpu"]
    if ranks is not None:
        assert sorted(ranks) == ["rank0.json", "rank1.json"], ranks
        for seen in ranks.values():
            assert (seen["ROCR_VISIBLE_DEVICES"], seen["CUDA_VISIBLE_DEVICES"], seen["HIP_VISIBLE_DEVICES"]) == (
                "0,1", None, None), seen


def test_probe_names_a_host_that_does_not_answer(cluster_factory):
    c = cluster_factory(2)
    c.stop_sshd(c.hosts[1])
    proc = bench("probe", "--hostfile", str(c.hostfile), "--json", "--probe-timeout", "15", env=c.env, timeout=120)
    assert proc.returncode == 1
    doc = one_json(proc.stdout)
    assert list(doc["unreachable"]) == [c.hosts[1]] and [n["host"] for n in doc["nodes"]] == [c.hosts[0]]
    assert doc["verdict"]["level"] == "fail"


def test_probe_health_sends_since_to_every_node(cluster):
    """--health --since over ssh: each node's own probe gets the time (HealthAsk.argv) and reads its kernel log
    from there; the time comes back as that node read it, whatever the node's zone."""
    proc = bench("probe", "--hostfile", str(cluster.hostfile), "--launcher", "pdsh", "--health",
                 "--since", "2026-12-02T10:00+00:00", "--json", env=cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]  # probe exits 1 only for a node it could not reach
    doc = one_json(proc.stdout)
    assert [n["host"] for n in doc["nodes"]] == cluster.hosts
    for node in doc["nodes"]:
        health = node["health"]
        assert health["since"] == "2026-12-02T10:00:00+00:00", (node["host"], health)
        sources = set(health["read"]) | {m["source"] for m in health["not_read"]}
        assert "kernel-log" in sources, (node["host"], health)
