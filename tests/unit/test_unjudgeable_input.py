"""Issue 53, item 6: input bench cannot judge is refused in one line (exit 2), before any node is judged.

Every file bench reads whole has a cap: `--topology /dev/zero` and a --health-from folder whose
nvidia-smi-q.txt is /dev/zero are one line, not a read until the OOM killer or a MemoryError. Those two run
`python -m bench` as a process under a 3 GiB address-space limit (RLIMIT_AS), so that the unbounded read of
main ends in a MemoryError traceback here rather than in the machine's OOM killer. --dcgm-timeout 1e9999 (inf)
and --rails naming one HCA twice are refused. Two hostfile names that reach one machine (the hostname it gives
when reached) are refused with both lines named: through bench validate on tests/scale_fixtures.py's nodes,
whose preflight answers are replaced by what a node0001.ib interface name would answer (the machine's hostname).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from tests import scale_fixtures as sf
from tests.conftest import REPO, assert_bad_input, cli

LIMIT = 3 << 30


def _limited(*args: str) -> subprocess.CompletedProcess:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO, preexec_fn=cap)


def _hostfile(tmp_path) -> str:
    (tmp_path / "hf").write_text("node1 slots=1\nnode2 slots=1\n")
    return str(tmp_path / "hf")


@pytest.mark.process  # bench as a process under a memory limit
def test_a_topology_that_is_dev_zero_is_one_line(tmp_path):
    proc = _limited("validate", "--hostfile", _hostfile(tmp_path), "--dry-run", "--out", str(tmp_path / "o"),
                    "--topology", "/dev/zero")
    assert_bad_input(proc, "--topology", "/dev/zero", "64 MiB")


@pytest.mark.process
def test_a_saved_health_report_that_is_dev_zero_is_one_line(tmp_path):
    folder = tmp_path / "node1"
    folder.mkdir()
    os.symlink("/dev/zero", folder / "nvidia-smi-q.txt")
    proc = _limited("validate", "--health-from", str(folder), "--out", str(tmp_path / "o"))
    assert_bad_input(proc, "--health-from", "nvidia-smi-q.txt", "64 MiB")


@pytest.mark.parametrize("value", ["1e9999", "inf", "nan", "86401"])
def test_a_dcgm_timeout_no_wait_can_take_is_refused(tmp_path, value):
    got = cli("validate", "--hostfile", _hostfile(tmp_path), "--dry-run", "--out", str(tmp_path / "o"),
              "--level", "full", "--dcgm-timeout", value)
    # Not a span at all (1e9999, inf, nan: the time-span parser's words), or past the day a diagnostic may take.
    assert_bad_input(got, "--dcgm-timeout", "86400" if value == "86401" else "is not a time span")


def test_one_hca_named_twice_in_rails_is_refused(tmp_path):
    got = cli("validate", "--hostfile", _hostfile(tmp_path), "--dry-run", "--out", str(tmp_path / "o"),
              "--level", "full", "--rails", "mlx5_0,mlx5_1,mlx5_0")
    assert_bad_input(got, "--rails", "'mlx5_0' twice")


def test_two_hostfile_names_of_one_machine_are_refused_with_both_lines(tmp_path, monkeypatch):
    cluster = sf.Cluster(4, bad={})
    hf = tmp_path / "hf"
    hf.write_text("".join(f"{h} slots=8\n" for h in cluster.hosts) + "# the same machine by its IB name\n"
                  "node0001.ib slots=8\n")
    cluster.install(monkeypatch.setattr)
    real = cluster.check_hosts

    def by_machine(hosts, timeout, run_root=None, via="ssh", **options):
        # What a machine answers under any of its names: its own hostname (node0001.ib reaches node0001).
        import dataclasses
        return [dataclasses.replace(c, hostname=c.host.split(".")[0])
                for c in real(hosts, timeout, run_root, via, **options)]

    monkeypatch.setattr("bench.validate.nodes.check_hosts", by_machine)
    got = cli("validate", "--hostfile", str(hf), "--out", str(tmp_path / "o"), "--checks", "throughput")
    assert_bad_input(got, f"{hf}:2 'node0001'", f"{hf}:6 'node0001.ib'", "one machine", "hostname 'node0001'")


def test_two_hostfile_names_whose_gpus_share_uuids_are_refused(tmp_path, monkeypatch):
    """Hostnames that differ (a VM, a hostname per interface) but one machine's GPUs under both names."""
    cluster = sf.Cluster(3, bad={})
    hf = tmp_path / "hf"
    hf.write_text("".join(f"{h} slots=8\n" for h in cluster.hosts) + "node0002-ib slots=8\n")
    cluster.install(monkeypatch.setattr)
    real = cluster.probe_any

    def with_uuids(via, resources, timeout, with_torch=False, container_exec=None, health=None):
        nodes, unreachable = real(via, resources, timeout, with_torch, container_exec, health)
        for n in nodes:  # as nvidia-smi --query-gpu=uuid names them: one per GPU, the machine's own
            for g in n["gpus"]:
                g["uuid"] = f"GPU-{n['host'].removesuffix('-ib')}-{g['index']}"
        return nodes, unreachable

    monkeypatch.setattr("bench.validate.nodes.probe_any", with_uuids)
    got = cli("validate", "--hostfile", str(hf), "--out", str(tmp_path / "o"), "--checks", "throughput")
    assert_bad_input(got, f"{hf}:3 'node0002'", f"{hf}:4 'node0002-ib'", "a GPU UUID 'GPU-node0002-0'")


def test_gpus_are_asked_for_their_uuid():
    from bench.cluster.accel.nvidia.smi import QUERY_FIELDS, parse_query_csv

    assert "uuid" in QUERY_FIELDS
    row = "0, NVIDIA H200, 143771, 9.0, 570.211.01, 00000000:18:00.0, Disabled, GPU-8b39353e-133c-96d0-7b5f-4195d9c60bae"
    assert parse_query_csv(row)["gpus"][0]["uuid"] == "GPU-8b39353e-133c-96d0-7b5f-4195d9c60bae"


def test_distinct_machines_pass_the_same_machine_check():
    from bench.cluster.same_machine import refuse

    refuse({"a": "a", "a.ib": "b", "c": ("GPU-1", "GPU-2"), "d": ("GPU-3",)}, "id", None)
    with pytest.raises(Exception, match="'c' and 'd' reach one machine"):
        refuse({"c": ("GPU-1", "GPU-2"), "d": ("gpu-2",)}, "a GPU UUID", None)
