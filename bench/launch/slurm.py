"""Ranks on the nodes of a Slurm allocation through srun, the command written by bench.

    Slurm().command(job) == ["srun", "-n", "4", "--nodelist", "n1,n2", "--nodes", "2",
                             "--ntasks-per-node", "2", "--kill-on-bad-exit=1", "--export=ALL",
                             python, "-u", "-m", "bench.worker", "--run-dir", RUN_DIR]

The nodes are reached through srun, never ssh (preflight_via, probe_via).
DeepSpeed's SlurmRunner (0.19.8) is not used: it passes the ranks'
environment as `--export=ALL,K=V,...`, which srun splits at every comma, so
NCCL_IB_HCA=mlx5_0,mlx5_1 or NCCL_SOCKET_IFNAME=^lo,docker arrive cut; it
drops --module; and it omits --kill-on-bad-exit, so one rank's OOM leaves
the others waiting for NCCL's watchdog. Here the ranks' variables are in
srun's own environment, which `--export=ALL` passes whole, and each rank
maps SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID itself (bench.worker.bootstrap).
"""

from __future__ import annotations

from bench.cluster.container import ContainerExec
from bench.cluster.slurm import slurm_hosts
from bench.core.errors import BadInput
from bench.launch.base import Job, MultiNode, require_leading_slots


class Slurm(MultiNode):
    name = "slurm"
    probe_via = "slurm"
    preflight_via = "srun"

    def implicit_hosts(self) -> dict[str, int] | None:
        # Inside a Slurm allocation the allocation is the hostfile.
        return slurm_hosts()

    def check(self, resources: dict[str, list[int]], container: ContainerExec | None,
              environ: dict[str, str]) -> None:
        require_leading_slots(self.name, resources)
        counts = {h: len(s) for h, s in resources.items()}
        if len(set(counts.values())) > 1:
            raise BadInput(f"--launcher slurm: srun places the same number of ranks on every host, got {counts}")

    def env_file(self, job: Job) -> dict[str, str]:
        return {}  # the variables travel in srun's environment (environment())

    def environment(self, job: Job) -> dict[str, str]:
        return {}  # no .deepspeed_env: the ranks' variables are already in this (srun's) environment

    def command(self, job: Job) -> list[str]:
        total = sum(len(s) for s in job.resources.values())
        per_node = len(next(iter(job.resources.values())))
        python = job.image_python() if job.container is not None else [job.python]
        return ["srun", "-n", str(total), "--nodelist", ",".join(job.resources), "--nodes", str(len(job.resources)),
                "--ntasks-per-node", str(per_node), "--kill-on-bad-exit=1", "--export=ALL", *python, "-u", "-m",
                job.module, "--run-dir", job.run_dir]
