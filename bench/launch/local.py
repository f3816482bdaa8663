"""Ranks on this machine only: DeepSpeed's per-node launcher, given the GPUs by index, or N slots for CPU ranks.

    Local().command(job) == [python, "-u", "-m", "deepspeed.launcher.launch",
                             "--world_info=" + base64('{"localhost": [0, 2]}'),
                             "--master_addr=127.0.0.1", "--master_port=PORT", "--module",
                             "--enable_each_rank_log=None", "bench.worker", "--run-dir", RUN_DIR]

This is the command DeepSpeed's runner (0.19.8) writes for one node, without
the runner: one interpreter fewer importing torch and DeepSpeed before the
ranks start. On GPUs the slots are the GPUs' indices (bench.jobs.plan.visible_gpus):
launch.py gives the ranks exactly those (CUDA_VISIBLE_DEVICES per rank), as
the runner's --include did. CPU ranks have no index: N slots start N, as
--num_gpus N did.
"""

from __future__ import annotations

from bench.launch.base import Job, Launcher


class Local(Launcher):
    name = "local"
    remote = False
    probe_via = "local"
    preflight_via = None

    def command(self, job: Job) -> list[str]:
        slots = next(iter(job.resources.values()))
        world = {"localhost": list(slots) if job.device == "cuda" else list(range(len(slots)))}
        return job.node_launch([job.python], world)
