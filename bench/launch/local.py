"""Ranks on this machine only: bench's node launcher, given the GPUs by index, or N slots for CPU ranks.

    Local().command(job) == [python, "-u", "-m", "bench.launch.node",
                             "--world-info=" + base64('{"localhost": [0, 2]}'),
                             "--master-addr=127.0.0.1", "--master-port=PORT",
                             "bench.worker", "--run-dir", RUN_DIR]

No DeepSpeed runner and no launch.py: bench.launch.node gives the ranks what
launch.py would, without two interpreters importing torch and DeepSpeed first
(5 s of a core a launch). On GPUs the slots are the GPUs' indices
(bench.jobs.plan.visible_gpus): each rank sees exactly those
(their backend's visible-devices variable), as DeepSpeed's --include gave them. CPU ranks have no
index: N slots start N, as DeepSpeed's --num_gpus N did.
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
