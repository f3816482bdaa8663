"""Fixtures for multi-host tests: real hosts (netns + sshd) on this machine.

    def test_x(cluster):                 # 3 hosts, shared by the session
        run_on_hosts(cluster.hosts, ["hostname"], env=cluster.env)

    def test_y(cluster_factory):         # a cluster of its own size
        c = cluster_factory(5)

See netns.py for the layout and the mpirun options that work across it.
Tests that break a host (stop_sshd, link_down) on the shared `cluster`
must restore it in a finally block; or take a cluster of their own.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from . import netns

INSTALL = Path(__file__).resolve().parents[2] / "scripts" / "install-system.sh"
NEEDED = ("sshd", "ssh", "ssh-keygen", "pdsh", "mpirun", "unshare")


def _ensure_tools() -> None:
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if all(shutil.which(t, path=path) for t in NEEDED):
        return
    # CI's fresh Debian has none of them; we are root (netns_possible said so).
    subprocess.run(["sh", str(INSTALL)], check=True)


@pytest.fixture(scope="session")
def cluster_factory() -> Iterator[Callable[[int], netns.Cluster]]:
    """make(n) builds n hosts; all are torn down at the end of the session."""
    reason = netns.netns_possible()
    if reason is not None:
        pytest.skip(reason)
    _ensure_tools()
    netns.clean_stale()
    with contextlib.ExitStack() as stack:

        def make(n: int = 3) -> netns.Cluster:
            return stack.enter_context(netns.build_cluster(n))

        yield make


@pytest.fixture(scope="session")
def cluster(cluster_factory: Callable[[int], netns.Cluster]) -> netns.Cluster:
    """Three hosts: 10.77.0.2-4 (node1-3) when no other run holds that subnet."""
    return cluster_factory(3)
