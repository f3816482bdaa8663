"""What every launcher is: a small class that turns a Job into the argv that starts its ranks.

    from bench.launch.registry import get
    launcher = get("pdsh")
    argv = launcher.command(job)        # an argument list; nothing is started

A Launcher subclass says, in its class attributes, everything bench does
differently for it elsewhere (how the nodes are probed, whether they are
preflighted over ssh, whether its process may be sent SIGTERM), so no other
module compares a launcher's name. No launcher goes through DeepSpeed's
runner (`python -m deepspeed.launcher.runner`), nor, on the nodes, through
its launch.py: each of those is an interpreter spending 2.5 s of a core on
importing torch and DeepSpeed before any rank starts. bench writes the
command they would write: local and pdsh ranks are started by bench's
per-node launcher (bench.launch.node), Open MPI ranks by bench's mpirun
command (bench.launch.openmpi), Slurm ranks by bench's srun command
(bench.launch.slurm).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import ClassVar

from bench.cluster.container import ContainerExec
from bench.cluster.hostfile import include_spec
from bench.core.placement import BY_LOCAL_RANK
from bench.launch.environment import runner_exports

NODE_LAUNCHER = ["-u", "-m", "bench.launch.node"]


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]               # environment of the launcher process
    env_file: dict[str, str] = field(default_factory=dict)  # written as .deepspeed_env
    hostfile: str | None = None
    launcher: str = "local"
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    module: str = "bench.worker"
    container: list[str] | None = None  # what enters the image on each node (bench.cluster.container)
    files: dict[str, str] = field(default_factory=dict)  # path -> text, written with the hostfile
    gpu_by: str = BY_LOCAL_RANK       # how a rank finds its GPU (bench.core.placement)
    open_files: int = 0               # file descriptors the launcher process needs (bench.launch.execute raises to it)
    accel: str | None = None          # the nodes' accelerator backend ("nvidia", "amd"; None: not named)

    def shell(self) -> str:
        """The exact command, copy-pasteable (for --dry-run and logs)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()) if k in _SHOWN_ENV)
        return (env + " " if env else "") + shlex.join(self.argv)


_SHOWN_ENV = ("DS_ENV_FILE", "OMP_NUM_THREADS", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR",
              "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "GLOO_SOCKET_IFNAME",
              "NCCL_SOCKET_IFNAME", "CUDA_DEVICE_ORDER")


@dataclass(frozen=True)
class Job:
    """What a launcher needs to know of one launch; built by bench.launch.plan.build."""

    resources: dict[str, list[int]]   # host -> slots, in hostfile order
    run_dir: str                      # absolute
    device: str                       # cuda or cpu
    master_addr: str
    master_port: int
    module: str                       # the rank entry point (bench.worker trains, bench.worker.comm times)
    environ: dict[str, str]           # the launching shell's environment
    rank_env: dict[str, str]          # what every rank gets (bench.launch.environment)
    container: ContainerExec | None = None
    python: str = sys.executable
    independent: bool = False
    """Every rank is a run of its own (bench validate's per-GPU run, the numerics job): one rank's exit must
    not end the others', under any launcher; training's ranks need each other, and one rank's exit ends them."""
    accel: str | None = None
    """The nodes' accelerator backend (bench/data/accelerators.json), whose visible-devices variable the node
    launcher sets to the slots (AMD's on AMD nodes); None: not named, the first GPU backend's (as before)."""

    @property
    def hostfile(self) -> str:
        return os.path.join(self.run_dir, "hostfile")

    @property
    def include(self) -> str:
        return include_spec(self.resources)

    def image_python(self) -> list[str]:
        """The container prefix (binding the results root) and the image's interpreter."""
        assert self.container is not None
        return [*self.container.prefix(os.path.dirname(self.run_dir)), self.container.python]

    def rank_python(self) -> list[str]:
        """What the ranks (or the node launcher) start under on the hosts: the image's interpreter, else this one."""
        return self.image_python() if self.container is not None else [self.python]

    def node_launch(self, python: list[str], world: dict[str, list[int]], node_rank: str | None = None) -> list[str]:
        """bench's per-node launcher (bench.launch.node) for `world` ({host: slots}, hosts in rank order): the
        world as base64 JSON (DeepSpeed's --world_info), the node's index among its hosts (pdsh's %n; none on
        one node), the rendezvous, then the ranks' module and its arguments."""
        world_info = base64.urlsafe_b64encode(json.dumps(world).encode("utf-8")).decode("utf-8")
        rank = [f"--node-rank={node_rank}"] if node_rank is not None else []
        return [*python, *NODE_LAUNCHER, f"--world-info={world_info}", *rank, f"--master-addr={self.master_addr}",
                f"--master-port={self.master_port}", *(["--independent"] if self.independent else []),
                *([f"--accel={self.accel}"] if self.accel else []), self.module,
                "--run-dir", self.run_dir]


class Launcher:
    """One way of starting ranks. Subclasses set the attributes and implement command()."""

    name: ClassVar[str]
    remote: ClassVar[bool] = True
    """Ranks may run on other hosts: they get .deepspeed_env, and are stopped there over ssh."""
    probe_via: ClassVar[str] = "ssh"
    """How bench takes the nodes' inventory: local, ssh, openmpi (mpirun, a rank per host) or slurm (srun)."""
    preflight_via: ClassVar[str | None] = "ssh"
    """How bench checks every host before launch (bench.cluster.preflight): ssh, srun (Slurm nodes often
    allow no ssh), or None (this node only: nothing to check)."""
    stop_with_sigterm: ClassVar[bool] = True
    """False where the launcher's own process gets SIGKILL before its group gets SIGTERM (pdsh: its remote ranks
    outlive their ssh sessions whatever pdsh is sent; bench stops them by PID)."""
    lists_every_slot: ClassVar[bool] = False
    """The hostfile bench writes lists each host's full slot count; --include picks the slots (pdsh)."""
    local_for_this_node: ClassVar[bool] = False
    """A launch on this machine alone starts local ranks instead (pdsh: nothing to reach over ssh). srun and
    mpirun still place the ranks of such a launch: they bind the allocation's GPUs."""
    gpu_by: ClassVar[str] = BY_LOCAL_RANK
    """How a rank finds its GPU (bench.core.placement): by local rank where the node launcher shows each node
    only its selected GPUs, by slot where the rank sees every GPU of its node (mpirun, srun)."""

    def implicit_hosts(self) -> dict[str, int] | None:
        """The hosts this launcher runs on without a hostfile ({host: slots}), or None: it needs one."""
        return None

    def check(self, resources: dict[str, list[int]], container: ContainerExec | None,
              environ: dict[str, str]) -> None:
        """Refuse, with BadInput naming the option, what this launcher cannot run.

        Everything it needs is known before a run directory exists, so bench refuses before it reaches a host.
        """

    def command(self, job: Job) -> list[str]:
        raise NotImplementedError

    def open_files(self, job: Job) -> int:
        """File descriptors the launcher process holds at once (0: no more than any process)."""
        return 0

    def files(self, job: Job) -> dict[str, str]:
        """Files the launch reads besides the hostfile and .deepspeed_env: {absolute path: text}."""
        return {}

    def environment(self, job: Job) -> dict[str, str]:
        """Variables the launcher's process needs besides the launching shell's (set only if unset there)."""
        return {}

    def env_file(self, job: Job) -> dict[str, str]:
        """What .deepspeed_env holds for the remote ranks; nothing for local ranks, which inherit it."""
        return dict(job.rank_env) if self.remote else {}


class MultiNode(Launcher):
    """A launcher whose ranks start on the hosts of a hostfile; its command() says how."""

    def exports(self, job: Job) -> dict[str, str]:
        """The variables the command hands to the remote ranks, as DeepSpeed's runner would from its environment
        (the shell's and the ranks') and the env file (bench.launch.environment.runner_exports)."""
        return runner_exports({**job.environ, **job.rank_env}, self.env_file(job), job.run_dir, job.device)

    def environment(self, job: Job) -> dict[str, str]:
        return {"DS_ENV_FILE": os.path.join(job.run_dir, ".deepspeed_env")}
