"""Ranks on a hostfile's hosts through Open MPI's mpirun, the command written by bench.

    OpenMPI().command(job) == ["mpirun", "-n", "4", "-hostfile", HF, "--mca", "btl", "^openib",
                               "--bind-to", "none", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0",
                               "-x", "UCX_TLS=tcp", "-x", "PYTHONPATH=RUN_DIR", "-x", "K=V", ...,
                               python, "-u", "-m", "bench.worker", "--run-dir", RUN_DIR]

This is the command DeepSpeed's OpenMPIRunner (0.19.8) writes, written by
bench instead of DeepSpeed's runner: the runner is an interpreter importing
torch and DeepSpeed before mpirun starts (2.5 s of a core a launch), and
the ranks map Open MPI's variables themselves (bench.worker.bootstrap).
Same options in the same order, the same exports (bench.launch.environment
.runner_exports, after the runner's UCX_TLS=tcp), with two differences:
each value is one argv word as it is, where the runner wraps a value with
characters outside its safe set in double quotes that reach the ranks as
part of it (NCCL_SOCKET_IFNAME="^lo,docker"); and in a container the ranks
start as `mpirun ... apptainer exec ... python -u -m MODULE` (the MPI hybrid
model) without the runner's --no_python.

An independent job (Job.independent: bench validate's per-GPU run, the
numerics job) must outlive one rank's exit, where mpirun by default ends the
whole job on the first non-zero status:

    [..., "--mca", "orte_abort_on_non_zero_status", "0", "-x", ...,
     python, "-u", "-m", "bench.launch.node", "--alone", "bench.worker", "--run-dir", RUN_DIR]

Told so, Open MPI 4.1.4 lets the others run, but exits 0 whatever the ranks'
statuses, says nothing of them, and waits forever for a rank that a signal
ended (one of three SIGKILLed: mpirun still there after 30 s; its errmgr
counts such a rank as ended only when it aborts the job). Each rank therefore
runs under bench's node launcher (--alone, standard library only): the rank's
end in the launcher's log in the node launcher's words (bench.launch.exits
reads them), and a status of 128 + N where a signal N ended it, so mpirun
sees only exits. Who never started is the hub's to say (bench.jobs.alone).
"""

from __future__ import annotations

from bench.cluster.container import ContainerExec
from bench.cluster.mpirun import mpirun_args
from bench.cluster.remote import is_local
from bench.core.errors import BadInput
from bench.core.placement import BY_SLOT
from bench.launch.base import NODE_LAUNCHER, Job, MultiNode

# Open MPI's TCP transport unless the user's UCX settings say otherwise (DeepSpeed's OpenMPIRunner sets it first;
# a UCX_TLS of the shell is exported after it and wins).
UCX_DEFAULT = {"UCX_TLS": "tcp"}


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

    def environment(self, job: Job) -> dict[str, str]:
        # mpirun refuses to run as root without both; a user's own values win.
        allow = {k: job.environ.get(k, "1") for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")}
        return {**super().environment(job), **allow}

    def command(self, job: Job) -> list[str]:
        """mpirun starting every rank, under this interpreter or the image's.

        OpenMPIRunner.get_cmd's command: -n the ranks, the hostfile bench wrote
        (each host's chosen slot count), `--mca btl ^openib`, `--mca
        btl_tcp_if_include eth0` unless bench's options name the interface
        (bench.cluster.mpirun), bench's options, one `-x K=V` per export, then
        the interpreter and the module.
        """
        total = sum(len(s) for s in job.resources.values())
        options = mpirun_args(job.environ)
        named = "btl_tcp_if_include" in options  # mpirun_args names the interface when one is known
        exports = {**UCX_DEFAULT, **self.exports(job)}
        keep_going = ["--mca", "orte_abort_on_non_zero_status", "0"] if job.independent else []
        entry = [*NODE_LAUNCHER, "--alone", job.module] if job.independent else ["-u", "-m", job.module]
        return ["mpirun", "-n", str(total), "-hostfile", job.hostfile, "--mca", "btl", "^openib",
                *([] if named else ["--mca", "btl_tcp_if_include", "eth0"]), *options, *keep_going,
                *[w for k, v in exports.items() for w in ("-x", f"{k}={v}")],
                *job.rank_python(), *entry, "--run-dir", job.run_dir]
