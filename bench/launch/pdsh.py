"""Ranks on a hostfile's hosts through pdsh: DeepSpeed's PDSHRunner, or bench's own pdsh command in a container.

    Pdsh().command(job) == [python, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", HF,
                            "--launcher", "pdsh", "--master_addr", A, "--master_port", P,
                            "--include", "n1:0@n2:1", "--no_ssh_check", "--venv_script", ACTIVATE,
                            "--module", "bench.worker", "--run-dir", RUN_DIR]

pdsh is the one launcher that picks single slots (--include host:1); the
hostfile then lists each host's full slot count. Its runner answers SIGTERM
by running `pkill -f` on every host, so bench never sends it one
(stop_with_sigterm) and stops ranks by PID instead.
"""

from __future__ import annotations

import base64
import json
import os
import shlex

from bench.launch.base import Job, MultiNode
from bench.launch.environment import runner_exports


class Pdsh(MultiNode):
    name = "pdsh"
    stop_with_sigterm = False
    lists_every_slot = True
    local_for_this_node = True

    def runner_options(self, job: Job) -> list[str]:
        argv = ["--include", job.include, "--no_ssh_check"]
        activate = os.path.join(os.path.dirname(job.python), "activate")
        if os.path.isfile(activate):
            argv += ["--venv_script", activate]
        return argv

    def environment(self, job: Job) -> dict[str, str]:
        env = super().environment(job)
        if job.container is not None:
            env["PDSH_RCMD_TYPE"] = "ssh"
        return env

    def container_command(self, job: Job) -> list[str]:
        """pdsh starting DeepSpeed's per-node launcher inside the image on every host.

        DeepSpeed's runner is bypassed here, not its launcher: PDSHRunner (0.19.8)
        always runs `<its own sys.executable> -u -m deepspeed.launcher.launch` on
        the hosts, a path that exists only inside the image, and its one hook,
        --venv_script, prepends `source SCRIPT;`, which cannot enter a container.
        This is PDSHRunner.get_cmd's command with the image's interpreter in place
        of that one: fan-out 1024, the hosts in resource order, --world_info (the
        resources as base64 JSON, as encode_world_info makes it), --node_rank=%n
        (pdsh's index of the host), the rendezvous, the exports, `cd` to the run
        dir. Two differences: values are shell-quoted (DeepSpeed's double quotes
        let a remote shell expand $(...)), and no `pkill -f` stop command goes
        with it (bench stops ranks by PID).
        """
        exports = runner_exports({**job.environ, **job.rank_env}, self.env_file(job), job.run_dir, job.device)
        world_info = base64.urlsafe_b64encode(json.dumps(job.resources).encode("utf-8")).decode("utf-8")
        node_launch = [*job.image_python(), "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world_info}",
                       "--node_rank=%n", f"--master_addr={job.master_addr}", f"--master_port={job.master_port}",
                       "--module", "--enable_each_rank_log=None", job.module, "--run-dir", job.run_dir]
        remote = ("".join(f"export {k}={shlex.quote(v)}; " for k, v in exports.items())
                  + f"cd {shlex.quote(job.run_dir)}; " + shlex.join(node_launch))
        return ["pdsh", "-S", "-f", "1024", "-w", ",".join(job.resources), remote]
