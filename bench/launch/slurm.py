"""Ranks on the nodes of a Slurm allocation through srun (DeepSpeed's SlurmRunner).

    Slurm().command(job) == [python, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", HF,
                             "--launcher", "slurm", "--master_addr", A, "--master_port", P,
                             "--no_ssh_check", "--include", "n1:0,1@n2:0,1",
                             RUN_DIR/rank_entry.py, "--run-dir", RUN_DIR]

The nodes are reached through srun, never ssh (preflight_ssh, probe_via).
DeepSpeed's slurm runner (0.19.8) runs `python -u SCRIPT` and drops
--module, so the ranks start from a script in the run dir (already on their
PYTHONPATH: the runner puts its cwd there) that runs the module.
"""

from __future__ import annotations

import os

from bench.cluster.slurm import slurm_hosts
from bench.core.errors import BadInput
from bench.launch.base import Job, MultiNode, require_leading_slots


class Slurm(MultiNode):
    name = "slurm"
    probe_via = "slurm"
    preflight_ssh = False

    def implicit_hosts(self) -> dict[str, int] | None:
        # Inside a Slurm allocation the allocation is the hostfile.
        return slurm_hosts()

    def check(self, job: Job) -> None:
        require_leading_slots(self.name, job.resources)
        counts = {h: len(s) for h, s in job.resources.items()}
        if job.container is not None and len(set(counts.values())) > 1:
            raise BadInput(f"--launcher slurm: srun needs the same number of ranks on every host, got {counts}")

    def runner_options(self, job: Job) -> list[str]:
        return ["--no_ssh_check", "--include", job.include]

    def entry(self, job: Job) -> list[str]:
        return [self.entry_script(job), "--run-dir", job.run_dir]

    def entry_script(self, job: Job) -> str | None:
        return os.path.join(job.run_dir, "rank_entry.py") if job.container is None else None

    def environment(self, job: Job) -> dict[str, str]:
        env = super().environment(job)
        if job.container is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (job.run_dir, job.environ.get("PYTHONPATH")) if p)
        return env

    def container_command(self, job: Job) -> list[str]:
        """srun starting every rank inside the image.

        DeepSpeed's SlurmRunner (0.19.8) puts its own sys.executable before the
        script whatever --no_python says, so it cannot run a container binary.
        This is its command for an --include'd set (-n, --nodelist, --nodes),
        with `--export=ALL` alone: the env file's variables are in srun's own
        environment instead, where a comma in a value cannot split the list.
        """
        total = sum(len(s) for s in job.resources.values())
        return ["srun", "-n", str(total), "--nodelist", ",".join(job.resources), "--nodes", str(len(job.resources)),
                "--export=ALL", *job.image_python(), "-u", "-m", job.module, "--run-dir", job.run_dir]


def entry_script_text(module: str) -> str:
    return ("# Written by bench: DeepSpeed's slurm runner cannot start a module.\n"
            f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
