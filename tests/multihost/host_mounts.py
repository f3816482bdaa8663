"""What one namespace host alone sees in its files: a mount inside its sshd's mount namespace (netns.py starts
each sshd under `ip netns exec`, which gives it a mount namespace of its own), so every ssh session, probe and
rank on that host sees it and no other host does. Removed on exit.

    with fake_hcas(cluster, host, {"mlx5_0": "vb0", "mlx5_1": "vb1", "mlx5_2": None}, tmp):
        ...     # /sys/class/infiniband/mlx5_0/device/net/vb0 -> /sys/class/net/vb0; mlx5_2 has no interface
    with on_path(cluster, host, bin_dir):
        ...     # bin_dir's files in /usr/local/sbin (on root's PATH, empty on Debian): a stand-in dcgmi

Fakes only for what cannot exist here: no HCA (an RDMA device under /sys/class/infiniband) and no DCGM package
can be had on this machine. The fake sysfs entries are the ones bench reads to map an HCA to its interface
(/sys/class/infiniband/<hca>/device/net/<interface>), over the host's real /sys/class (an overlay, so
/sys/class/net stays the kernel's).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from .netns import Cluster


def _in_host(c: Cluster, host: str, argv: list[str]) -> None:
    subprocess.run(["nsenter", "-t", str(c.sshd_pids[host]), "-m", *argv], check=True, capture_output=True,
                   text=True)


@contextlib.contextmanager
def _mounted(c: Cluster, host: str, argv: list[str], target: str) -> Iterator[None]:
    _in_host(c, host, argv)
    try:
        yield
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _in_host(c, host, ["umount", "-l", target])


@contextlib.contextmanager
def fake_hcas(c: Cluster, host: str, hcas: dict[str, str | None], tmp: Path) -> Iterator[None]:
    """The host's /sys/class with an infiniband/ entry per HCA whose device/net/ holds its interface (None: none)."""
    upper, work = tmp / f"sys-{host}" / "upper", tmp / f"sys-{host}" / "work"
    for hca, iface in hcas.items():
        net = upper / "infiniband" / hca / "device" / "net"
        net.mkdir(parents=True)
        if iface:
            os.symlink(f"/sys/class/net/{iface}", net / iface)
    work.mkdir(parents=True)
    with _mounted(c, host, ["mount", "-t", "overlay", "vitbench-fake-hca", "-o",
                            f"lowerdir=/sys/class,upperdir={upper},workdir={work}", "/sys/class"], "/sys/class"):
        yield


@contextlib.contextmanager
def on_path(c: Cluster, host: str, bin_dir: Path) -> Iterator[None]:
    """bin_dir seen by the host alone as /usr/local/sbin."""
    with _mounted(c, host, ["mount", "--bind", str(bin_dir), "/usr/local/sbin"], "/usr/local/sbin"):
        yield
