"""Ranks on this machine only: DeepSpeed's runner with --num_gpus.

    Local().command(job) == [python, "-u", "-m", "deepspeed.launcher.runner",
                             "--hostfile", RUN_DIR/no-hostfile, "--num_gpus", "2",
                             "--master_addr", "127.0.0.1", "--master_port", PORT,
                             "--module", "bench.worker", "--run-dir", RUN_DIR]
"""

from __future__ import annotations

import os

from bench.launch.base import Job, Launcher


class Local(Launcher):
    name = "local"
    remote = False
    probe_via = "local"
    preflight_ssh = False

    def command(self, job: Job) -> list[str]:
        n = len(next(iter(job.resources.values())))
        # An explicit, absent hostfile: never pick up a stray /job/hostfile.
        return [*job.runner(), "--hostfile", os.path.join(job.run_dir, "no-hostfile"), "--num_gpus", str(n),
                "--master_addr", job.master_addr, "--master_port", str(job.master_port), *job.entry()]
