"""The launchers bench has, by name (bench.core.config.LAUNCHERS names the same four).

    from bench.launch.registry import get, default_for
    get("openmpi").probe_via        # "openmpi"
    default_for(3)                  # "pdsh": several hosts and no --launcher
"""

from __future__ import annotations

from bench.core.errors import BadInput
from bench.launch.base import Launcher
from bench.launch.local import Local
from bench.launch.openmpi import OpenMPI
from bench.launch.pdsh import Pdsh
from bench.launch.slurm import Slurm

LAUNCHERS: dict[str, type[Launcher]] = {cls.name: cls for cls in (Local, Pdsh, OpenMPI, Slurm)}
# With several hosts and no --launcher: pdsh needs only ssh to the hosts.
MULTI_HOST_DEFAULT = Pdsh.name
# Ranks on this machine alone.
LOCAL = Local.name


def get(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]()
    except KeyError:
        raise BadInput(f"--launcher: unknown launcher {name!r} (known: {', '.join(LAUNCHERS)})") from None


def default_for(hosts: int) -> str:
    """The launcher bench uses when none is named: local for one host, else MULTI_HOST_DEFAULT."""
    return MULTI_HOST_DEFAULT if hosts > 1 else "local"
