"""Which nodes bench validate checks and how it reaches them: a hostfile, a Slurm allocation, or this node.

    w = where(cfg, hosts)        # Where(resources={"node1": [0, 1], ...}, launcher="slurm", hostfile_text=...)

  --level prolog, or no hostfile outside an allocation: this node alone, local ranks;
  --hostfile H: its hosts, through pdsh (ssh) unless --launcher says
      openmpi or slurm;
  no hostfile inside a Slurm allocation (salloc, sbatch): the allocation's
      nodes, a slot per GPU the job holds on each (a task per slot on CPU
      nodes: bench.cluster.slurm.allocation_slots), through srun job steps
      unless --launcher says openmpi. The allocation is written as a hostfile
      into the validate folder, so every later launch (and a person) reads
      the same hosts.
Nothing in a Slurm or Open MPI validate uses ssh: preflight and inventory go
through srun or mpirun too (the launcher class says how).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.cluster.hostfile import HostSelection
from bench.cluster.slurm import allocation_slots, in_allocation
from bench.core.errors import BadInput
from bench.launch.registry import LOCAL
from bench.validate.config import THIS_NODE, ValidateConfig


@dataclass(frozen=True)
class Where:
    resources: dict[str, list[int]]
    launcher: str                 # slurm, openmpi, pdsh, or local (this node alone)
    hostfile_text: str | None     # the allocation as a hostfile, for the validate folder; None: the user's own


def _this_node() -> Where:
    from bench.core.config import RunConfig
    from bench.jobs.plan import plan_resources

    resources = dict(plan_resources(RunConfig(), HostSelection()).resources)
    # As a hostfile too: a later launch leaves a failed GPU out by its slot (--include localhost:0,2).
    return Where(resources, LOCAL, "".join(f"{h} slots={max(s) + 1}\n" for h, s in resources.items() if s))


def where(cfg: ValidateConfig, hosts: HostSelection) -> Where:
    allocation = in_allocation()
    if cfg.level == "prolog" or (cfg.level in THIS_NODE and not hosts.hostfile and not
                                 (cfg.launcher and allocation)):
        if hosts.hostfile:
            raise BadInput(f"--level {cfg.level}: checks this node only; give no --hostfile (run it on each node)")
        if cfg.launcher not in (None, LOCAL):
            raise BadInput(f"--launcher: --level {cfg.level} checks this node alone, with local ranks")
        return _this_node()
    if cfg.launcher == LOCAL:
        if hosts.hostfile:
            raise BadInput("--launcher local: checks this node alone; give no --hostfile")
        return _this_node()
    if hosts.hostfile:
        resources = hosts.resources()
        assert resources is not None
        return Where(resources, cfg.launcher or "pdsh", None)
    if not allocation:
        if cfg.launcher:
            raise BadInput(f"--launcher {cfg.launcher}: needs --hostfile, or a Slurm allocation to take the nodes "
                           "from (salloc, sbatch)")
        # No hostfile and no allocation: this node, as `bench run` does (a node checked on its own before it
        # returns to service: `bench validate --undrain` on it).
        return _this_node()
    slots = allocation_slots()
    resources = hosts.resources(local_hosts=slots)
    assert resources is not None
    # Each node's whole slot count: the runs select their slots from it (--include host:0,2).
    text = "".join(f"{h} slots={slots[h]}\n" for h in resources)
    return Where(resources, cfg.launcher or "slurm", text)
