"""Ranks on the nodes of a Slurm allocation through srun, the command written by bench.

    Slurm().command(job) == ["srun", "-n", "3", "--nodes", "2", "--distribution=arbitrary",
                             "--kill-on-bad-exit=1", "--export=ALL",
                             python, "-u", "-m", "bench.worker", "--run-dir", RUN_DIR]
    Slurm().files(job) == {RUN_DIR + "/slurm-tasks": "n1\nn1\nn2\n"}   # SLURM_HOSTFILE: task r's node
    # an independent job (Job.independent: bench validate's per-GPU run): "--kill-on-bad-exit=0"

The nodes are reached through srun, never ssh (preflight_via, probe_via).
Each task's node is given by a task list (SLURM_HOSTFILE with
--distribution=arbitrary), so rank r runs where the plan put it, whatever
order Slurm keeps its nodes in, with any number of ranks a node and any
slots: a rank that sees every GPU of its node takes its slot
(bench.core.placement, gpu_by "slot"); bench validate leaves a failed GPU
out by its slot. DeepSpeed's SlurmRunner (0.19.8) is not used: it passes
the ranks' environment as `--export=ALL,K=V,...`, which srun splits at
every comma, so NCCL_IB_HCA=mlx5_0,mlx5_1 or NCCL_SOCKET_IFNAME=^lo,docker
arrive cut; it drops --module; and it omits --kill-on-bad-exit, so one
rank's OOM leaves the others waiting for NCCL's watchdog. Here the ranks'
variables are in srun's own environment, which `--export=ALL` passes
whole, and each rank maps SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID
itself (bench.worker.bootstrap).
"""

from __future__ import annotations

import os

from bench.cluster.slurm import slurm_hosts
from bench.core.placement import BY_SLOT, rank_slots
from bench.launch.base import Job, MultiNode

TASK_LIST = "slurm-tasks"


class Slurm(MultiNode):
    name = "slurm"
    probe_via = "slurm"
    preflight_via = "srun"
    gpu_by = BY_SLOT

    def implicit_hosts(self) -> dict[str, int] | None:
        # Inside a Slurm allocation the allocation is the hostfile.
        return slurm_hosts()

    def env_file(self, job: Job) -> dict[str, str]:
        return {}  # the variables travel in srun's environment (environment())

    def environment(self, job: Job) -> dict[str, str]:
        # No .deepspeed_env: the ranks' variables are already in this (srun's) environment. The task list
        # places each rank; a SLURM_HOSTFILE of the shell would place them elsewhere.
        return {"SLURM_HOSTFILE": os.path.join(job.run_dir, TASK_LIST)}

    def files(self, job: Job) -> dict[str, str]:
        return {os.path.join(job.run_dir, TASK_LIST): "".join(f"{h}\n" for h, _ in rank_slots(job.resources))}

    def command(self, job: Job) -> list[str]:
        total = sum(len(s) for s in job.resources.values())
        # Training's ranks need each other: one that fails ends the step at once (its peers would wait for NCCL's
        # watchdog). Independent ranks go on: 0 said, not left out, so a site's KillOnBadExit=1 does not end them.
        kill = "0" if job.independent else "1"
        return ["srun", "-n", str(total), "--nodes", str(len(job.resources)), "--distribution=arbitrary",
                f"--kill-on-bad-exit={kill}", "--export=ALL", *job.rank_python(), "-u", "-m", job.module, "--run-dir",
                job.run_dir]
