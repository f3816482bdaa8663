"""What a site's launches need that bench validate shares with bench run: how ranks enter the image and meet.

bench.core.config.LaunchConfig (bench run, comm, sweep, tune) has the same options with the same help; a site
profile (bench.commands.profile) sets them once for every command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.core.containerspec import check_text
from bench.core.errors import BadInput
from bench.core.options import opt, seconds

CONTAINER_EXEC_HELP = ("how remote ranks enter the image: \"apptainer exec [--nv] IMAGE\" (default: the "
                       "Apptainer/Singularity image bench runs in, detected; none: no prefix)")


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteLaunch:
    container_exec: str | None = opt(CONTAINER_EXEC_HELP, default=None)
    master_addr: str | None = opt("rendezvous address of the hostfile's first node: every launch whose rank 0 is "
                                  "there meets at it (default, and a launch of other nodes: its first host)",
                                  default=None)
    timeout: float | None = opt("seconds (or 90s, 20m) one launch may take before it is called hung (default: the "
                                "level's, grown with the nodes and ranks of the launch)", default=None,
                                parse=seconds, metavar="S")

    def master_addr_of(self, head: str | None, hosts: list[str]) -> str | None:
        """The rendezvous address of a launch of `hosts` (rank 0 on hosts[0]): --master-addr names the first
        node (`head`), so it is the address of the launches that node leads; a launch of other nodes (a pair of
        the second and third) meets at its own first host (None: bench.launch.plan's default), not at an address
        where none of its ranks listens."""
        return self.master_addr if hosts[:1] == [head] else None

    def check_launch(self) -> None:
        check_text(self.container_exec)
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise BadInput(f"--timeout: must be > 0 seconds, got {self.timeout:g}")
