"""Ranks on a hostfile's hosts through Open MPI's mpirun (DeepSpeed's OpenMPIRunner).

    OpenMPI().command(job) == [python, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", HF,
                               "--launcher", "openmpi", "--master_addr", A, "--master_port", P,
                               "--launcher_args", "--bind-to none --oversubscribe ...",
                               "--module", "bench.worker", "--run-dir", RUN_DIR]

In a container it is the MPI hybrid model, `mpirun ... apptainer exec ...
python -u -m MODULE`, through the runner's --no_python.
"""

from __future__ import annotations

import shlex

from bench.cluster.container import ContainerExec
from bench.cluster.mpirun import mpirun_args
from bench.cluster.remote import is_local
from bench.core.errors import BadInput
from bench.core.placement import BY_SLOT
from bench.launch.base import Job, MultiNode


class OpenMPI(MultiNode):
    name = "openmpi"
    probe_via = "openmpi"
    preflight_via = "mpirun"
    gpu_by = BY_SLOT  # mpirun shows a rank every GPU of its node: it takes its slot (any slots, any counts)

    def check(self, resources: dict[str, list[int]], container: ContainerExec | None,
              environ: dict[str, str]) -> None:
        if container is not None and container.in_container:
            here = [h for h in resources if is_local(h)]
            if here:
                raise BadInput(f"--launcher openmpi: {here[0]} is this node, where mpirun would start ranks itself, "
                               f"inside this container, which has no {container.argv[0]}; launch from a node "
                               "outside the hostfile, or use --launcher pdsh")
        mpirun_args(environ)  # an interface mpirun cannot take (NCCL_SOCKET_IFNAME=^lo) is refused here

    def runner_options(self, job: Job) -> list[str]:
        # --no_ssh_check: DeepSpeed's runner would ssh to the first host first; inside a Slurm allocation mpirun
        # starts its daemons through srun and a node may take no ssh at all. bench's preflight reached every host.
        return ["--no_ssh_check", "--launcher_args", shlex.join(mpirun_args(job.environ))]

    def environment(self, job: Job) -> dict[str, str]:
        # mpirun refuses to run as root without both; a user's own values win.
        allow = {k: job.environ.get(k, "1") for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")}
        return {**super().environment(job), **allow}

    def container_command(self, job: Job) -> list[str]:
        # --no_python: DeepSpeed's OpenMPIRunner then runs the "script" (the
        # container binary) as is, `mpirun ... apptainer exec ... python -u -m
        # MODULE`; --module must go, or it would put `-m` before apptainer.
        return [*self.runner_command(job), "--no_python", *job.image_python(), "-u", "-m", job.module,
                "--run-dir", job.run_dir]
