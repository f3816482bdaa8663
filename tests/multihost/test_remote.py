"""bench.remote against real hosts: namespaces with their own sshd (see netns.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.cluster.remote import run_on_hosts

pytestmark = pytest.mark.multihost

MPI_ALLREDUCE_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, one, sum;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("%s %d/%d %d\n", host, rank, size, sum);
    MPI_Finalize();
    return 0;
}
"""


def _mpi_env(cluster) -> dict[str, str]:
    return dict(cluster.env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def test_hostname_on_every_host(cluster):
    results = run_on_hosts(cluster.hosts, ["hostname"], env=cluster.env)
    assert list(results) == cluster.hosts
    assert [r.stdout.strip() for r in results.values()] == cluster.hostnames
    assert all(r.ok for r in results.values()), results


def test_arguments_arrive_unsplit(cluster):
    # The remote side is a shell: without quoting, ';' would run a second command.
    argv = ["printf", "%s|", "a b", "c;echo injected", "$HOME", "'q'"]
    results = run_on_hosts(cluster.hosts[:1], argv, env=cluster.env)
    assert results[cluster.hosts[0]].stdout == "a b|c;echo injected|$HOME|'q'|"


def test_remote_exit_status_comes_back(cluster):
    results = run_on_hosts(cluster.hosts, ["sh", "-c", "exit 3"], env=cluster.env)
    assert {r.rc for r in results.values()} == {3}
    assert all(r.error is None for r in results.values())


def test_each_host_is_its_own_network(cluster):
    # The veth inside every namespace has the same name: GLOO_SOCKET_IFNAME=vb0 fits all.
    results = run_on_hosts(cluster.hosts, ["cat", "/sys/class/net/vb0/address"], env=cluster.env)
    macs = [r.stdout.strip() for r in results.values()]
    assert all(macs) and len(set(macs)) == len(macs)
    assert cluster.env["GLOO_SOCKET_IFNAME"] == "vb0"


def test_pdsh_reaches_every_host(cluster):
    proc = subprocess.run(
        ["pdsh", "-R", "ssh", "-w", ",".join(cluster.hosts), "hostname"],
        env=cluster.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pairs = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert pairs == dict(zip(cluster.hosts, cluster.hostnames))


def test_mpirun_runs_hostname_on_every_host(cluster):
    proc = subprocess.run(
        ["mpirun", "-np", str(len(cluster.hosts)), "--hostfile", str(cluster.hostfile),
         *cluster.mpirun_args(), "hostname"],
        env=_mpi_env(cluster), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == cluster.hostnames


def test_mpirun_allreduce_across_hosts(cluster, tmp_path: Path):
    # MPI traffic between ranks, not only the launch: btl_tcp_if_include matters here.
    src = tmp_path / "allreduce.c"
    src.write_text(MPI_ALLREDUCE_C)
    exe = tmp_path / "allreduce"
    subprocess.run(["mpicc", "-o", str(exe), str(src)], check=True, timeout=120)
    n = len(cluster.hosts)
    proc = subprocess.run(
        ["mpirun", "-np", str(n), "--hostfile", str(cluster.hostfile), *cluster.mpirun_args(),
         str(exe)],
        env=_mpi_env(cluster), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = sorted(line.split() for line in proc.stdout.splitlines())
    expected_sum = str(n * (n + 1) // 2)
    assert rows == [[name, f"{i}/{n}", expected_sum] for i, name in enumerate(cluster.hostnames)]


def test_stopped_sshd_is_named_with_an_error(cluster):
    down = cluster.hosts[1]
    cluster.stop_sshd(down)
    try:
        results = run_on_hosts(cluster.hosts, ["hostname"], timeout=15, env=cluster.env)
    finally:
        cluster.start_sshd(down)
    bad = results[down]
    assert bad.rc is None or bad.rc == 255
    assert bad.error is not None and "refused" in bad.error and down in bad.error
    assert "\n" not in bad.error
    others = [r for h, r in results.items() if h != down]
    assert all(r.ok for r in others)


def test_cut_link_is_named_with_an_error(cluster):
    cut = cluster.hosts[2]
    cluster.link_down(cut)
    try:
        results = run_on_hosts(cluster.hosts, ["hostname"], timeout=15, env=cluster.env)
    finally:
        cluster.link_up(cut)
    assert results[cut].error is not None, results[cut]
    assert all(r.ok for h, r in results.items() if h != cut)


def test_timeout_kills_the_local_ssh_and_names_the_host(cluster):
    results = run_on_hosts(cluster.hosts[:1], ["sleep", "60"], timeout=1, env=cluster.env)
    r = results[cluster.hosts[0]]
    assert r.rc is None and r.error == "timeout after 1s"
