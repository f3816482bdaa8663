"""Ranks on a hostfile's hosts through pdsh, each host's started by bench's node launcher.

    Pdsh().command(job) == ["pdsh", "-S", "-f", "1024", "-w", "n1,n2",
                            "export PYTHONPATH=RUN_DIR; export K=V; ...; cd RUN_DIR; "
                            "python -u -m bench.launch.node --world-info=... --node-rank=%n "
                            "--master-addr=A --master-port=P bench.worker --run-dir RUN_DIR"]

This is DeepSpeed's PDSHRunner command (0.19.8) with bench.launch.node in
place of DeepSpeed's launch.py, written by bench instead of DeepSpeed's
runner: the runner and launch.py are interpreters importing torch and
DeepSpeed before any rank starts (2.5 s of a core each, the latter on every
host), the runner answers SIGTERM by running `pkill -f` on every host, and
its only hook, --venv_script, cannot enter a container. pdsh picks single
slots: the world lists only the chosen ones (host:1), and each rank sees
only its node's chosen GPUs. bench SIGKILLs pdsh (stop_with_sigterm) and
stops the remote ranks by PID.
"""

from __future__ import annotations

import shlex

from bench.launch.base import Job, MultiNode


# DeepSpeed's PDSHRunner's fan-out, kept while the hosts fit in it (the same argv word for word).
FANOUT = 1024
# Descriptors pdsh holds per host (its socketpair, the ssh child's stdin/stdout/stderr pipes), rounded up.
FDS_PER_HOST = 8


class Pdsh(MultiNode):
    name = "pdsh"
    stop_with_sigterm = False
    lists_every_slot = True
    local_for_this_node = True

    def environment(self, job: Job) -> dict[str, str]:
        return {**super().environment(job), "PDSH_RCMD_TYPE": "ssh"}

    def command(self, job: Job) -> list[str]:
        """pdsh starting bench's node launcher on every host, under this interpreter or the image's.

        PDSHRunner.get_cmd's command: fan-out 1024 (the host count past 1,024), the hosts in resource order,
        the exports runner_exports makes, `cd` to the run dir, then the node
        launcher with --node-rank=%n (pdsh's index of the host). Other than that:
        values are shell-quoted (DeepSpeed's double quotes let a remote shell
        expand $(...)), and no `source` of the venv's activate script: the
        interpreter is named by its path, and PATH (the venv's bin first) is
        among the exports.
        """
        remote = ("".join(f"export {k}={shlex.quote(v)}; " for k, v in self.exports(job).items())
                  + f"cd {shlex.quote(job.run_dir)}; "
                  + shlex.join(job.node_launch(job.rank_python(), job.resources, "%n")))
        # Each host's ssh lives as long as its ranks: a window (-f) smaller than the hosts would start the rest
        # only as ranks end, and the first ranks wait for them at the rendezvous until the timeout.
        fanout = max(FANOUT, len(job.resources))
        return ["pdsh", "-S", "-f", str(fanout), "-w", ",".join(job.resources), remote]

    def open_files(self, job: Job) -> int:
        """pdsh holds a socketpair and the ssh module's pipes per host for the whole run: with the usual soft limit
        of 1,024 descriptors it breaks near 500 hosts (chaos/pdsh#123, 'poll/close error storm' at fanout 496)."""
        return FDS_PER_HOST * len(job.resources) + 64
