"""Ranks on this machine only: DeepSpeed's runner with the GPUs named, or --num_gpus for CPU ranks.

    Local().command(job) == [python, "-u", "-m", "deepspeed.launcher.runner",
                             "--hostfile", RUN_DIR/no-hostfile, "--include", "localhost:0,2",
                             "--master_addr", "127.0.0.1", "--master_port", PORT,
                             "--module", "bench.worker", "--run-dir", RUN_DIR]

On GPUs the slots are the GPUs' indices (bench.jobs.plan.visible_gpus):
--include makes DeepSpeed's launcher give the ranks exactly those
(CUDA_VISIBLE_DEVICES per rank); --num_gpus N would take GPUs 0..N-1
whatever was chosen. CPU ranks have no index: --num_gpus N starts N.
"""

from __future__ import annotations

import os

from bench.launch.base import Job, Launcher


class Local(Launcher):
    name = "local"
    remote = False
    probe_via = "local"
    preflight_via = None

    def command(self, job: Job) -> list[str]:
        slots = next(iter(job.resources.values()))
        which = (["--include", "localhost:" + ",".join(map(str, slots))] if job.device == "cuda"
                 else ["--num_gpus", str(len(slots))])
        # An explicit, absent hostfile: never pick up a stray /job/hostfile.
        return [*job.runner(), "--hostfile", os.path.join(job.run_dir, "no-hostfile"), *which,
                "--master_addr", job.master_addr, "--master_port", str(job.master_port), *job.entry()]
