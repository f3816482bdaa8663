"""(resources, launcher, run dir) -> a LaunchPlan: the launch command, its environment and the files it reads.

    from bench.launch.plan import build, check, write_files
    check({"n1": [0], "n2": [0]}, "pdsh", "cpu")    # BadInput for what build would refuse; nothing made
    lp = build({"n1": [0], "n2": [0]}, "pdsh", run_dir, "cpu")
    write_files(lp, resources, slots_of)       # hostfile, .deepspeed_env, rank_entry.py where needed
    print(lp.shell())                          # the exact command, copy-pasteable

Knows nothing of the model. Each launcher is a class (bench.launch.registry)
that makes its own argv; what they share is here: exact resources (a
resolved hostfile), an environment file of KEY=VALUE lines with values no
remote shell can expand, a free rendezvous port, and the remote ranks
started inside the image bench runs in (bench.cluster.container).
"""

from __future__ import annotations

import math
import os
import socket

from bench.cluster import container
from bench.cluster.container import ContainerExec
from bench.cluster.slurm import in_allocation, node_addr
from bench.core import conversation
from bench.core.accel_names import VISIBLE_ENVS
from bench.launch.base import Job, LaunchPlan, Launcher
from bench.launch.environment import FORWARD_PREFIXES, check_env_value, is_secret, rank_environment
from bench.launch.registry import get


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _checked(resources: dict[str, list[int]], launcher: str, device: str, container_exec: str | None,
             environ: dict[str, str], accel: str | None = None
             ) -> tuple[Launcher, ContainerExec | None, dict[str, str]]:
    """The launcher, the image prefix and the ranks' environment; every refusal of the launch is made here."""
    kind = get(launcher)
    ce = container.resolve(container_exec, environ) if kind.remote else None
    if ce is not None and device == "cuda":
        ce = ce.with_devices(device, accel)  # the nodes have GPUs (the plan's device came from their inventory)
    rank_env = rank_environment(device, environ, accel)
    if ce is not None and ce.in_container:
        # This PATH is the image's, not the nodes': exported there it could only
        # hide the host's apptainer. Inside, the image sets its own (Apptainer
        # never passes the host's PATH in).
        del rank_env["PATH"]
    for k, v in rank_env.items():
        check_env_value(k, v, "environment")
    kind.check(resources, ce, environ)
    return kind, ce, rank_env


def check(resources: dict[str, list[int]], launcher: str, device: str, container_exec: str | None = None,
          environ: dict[str, str] | None = None) -> None:
    """BadInput for whatever build() would refuse of this launch; nothing is made (no run directory yet)."""
    _checked(resources, launcher, device, container_exec, dict(os.environ if environ is None else environ))


def build(resources: dict[str, list[int]], launcher: str, run_dir: str, device: str,
          master_addr: str | None = None, master_port: int | None = None,
          environ: dict[str, str] | None = None, module: str = "bench.worker",
          container_exec: str | None = None, independent: bool = False, accel: str | None = None) -> LaunchPlan:
    """The launch argv and environments for this run (nothing is started here).

    independent: every rank is a run of its own (Job.independent): no launcher ends the others when one exits.
    accel: the nodes' accelerator backend (Job.accel; the verdict's "accel"), named on GPU launches only.

    container_exec: RunConfig.container_exec; with a multi-node launcher,
    remote ranks start inside that image, or the one bench runs in
    (bench.cluster.container). One node needs no prefix: bench is already there.
    """
    environ = dict(os.environ if environ is None else environ)
    run_dir = os.path.abspath(run_dir)
    accel = accel if device != "cpu" else None
    kind, ce, rank_env = _checked(resources, launcher, device, container_exec, environ, accel)
    if master_addr is None and kind.remote:
        # Inside a Slurm allocation the hosts are Slurm's node names: rank 0's node is reached at Slurm's own
        # address for it (NodeAddr), which resolves where the name may not.
        hosts = list(resources)
        master_addr = node_addr(hosts[0], environ) if in_allocation(environ) else hosts[0]
    job = Job(resources=resources, run_dir=run_dir, device=device,
              master_addr=master_addr or "127.0.0.1",
              master_port=master_port or free_port(), module=module, environ=environ, rank_env=rank_env,
              container=ce, independent=independent, accel=accel)
    # The launcher's own environment, which local ranks inherit: without the
    # secret-named variables DeepSpeed would log (see rank_environment).
    env = {k: v for k, v in environ.items() if not (k.startswith(FORWARD_PREFIXES) and is_secret(k))}
    if device == "cuda":
        # The ranks' GPUs are the slots (--include, the hostfile): the node launcher sets each rank's
        # visible-devices variable from them (DeepSpeed's runner would drop this shell's choice in silence).
        # Every vendor's (bench.core.accel_names.VISIBLE_ENVS): a ROCm runtime narrows one's list by the others.
        for name in VISIBLE_ENVS:
            env.pop(name, None)
    env.update(rank_env)
    env.update(kind.environment(job))
    return LaunchPlan(argv=kind.command(job), env=env, env_file=kind.env_file(job),
                      hostfile=job.hostfile if kind.remote else None, launcher=kind.name,
                      master_addr=job.master_addr, master_port=job.master_port,
                      module=module, container=ce.prefix(os.path.dirname(run_dir)) if ce is not None else None,
                      files=kind.files(job), gpu_by=kind.gpu_by, open_files=kind.open_files(job), accel=job.accel)


# How long past the ranks' collective timeout the watchdog waits (gloo): ranks blocked on a hung peer then report
# their own timeout first, and the one still silent is the culprit.
REPORT_GRACE_S = 15.0
# Before the first step the watchdog waits at least this long: imports on a busy node, the rendezvous of every
# rank, a JIT build of a DeepSpeed op (~40 s on 2 cores) are not a hang, whatever --timeout says about steps.
STARTUP_FLOOR_S = 120.0
# On GPUs (NCCL) the order is the other way round. torch's NCCL watchdog does not report a collective that timed
# out to the rank's Python: it dumps its flight record (waiting up to TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC) and
# aborts the process ("we are taking the entire process down"), so a rank's `except` never runs and the ranks
# would die, SIGABRT, before bench's watchdog asked them anything. There bench's watchdog fires first: the
# collective timeout is its wait (for the first step too) plus this, time enough to ask every rank for its stack
# and flight record (bench.launch.stacks.WAIT_S + DUMP_WAIT_S, seconds) and to stop them.
NCCL_ORDER_S = 60.0


def timeouts(device: str, timeout: float, collective_timeout: float | None = None) -> dict[str, float | int | str]:
    """The collective timeout, bench's watchdog and its wait for the first step, and which of them fires first.

    The collective timeout is --collective-timeout when given (kept as given: the user's order wins, and a run
    whose ranks NCCL took down is diagnosed from their logs and dumps, bench.launch.nccl_watchdog); else on
    GPUs the watchdog's wait for the first step + NCCL_ORDER_S, so bench's watchdog fires first; else (gloo)
    --timeout, at least 30 s, with the watchdog REPORT_GRACE_S past it, so the ranks' own reports come first.
    """
    chosen = collective_timeout is not None
    if device == "cuda" and not chosen:
        watchdog = float(timeout)
        startup = max(watchdog, STARTUP_FLOOR_S)
        return {"collective_timeout_s": math.ceil(startup + NCCL_ORDER_S), "watchdog_s": watchdog,
                "startup_s": startup, "first": "watchdog"}
    coll = max(1, int(collective_timeout)) if chosen else max(30, int(timeout))
    watchdog = float(timeout) if chosen and coll > timeout else max(float(timeout), coll + REPORT_GRACE_S)
    return {"collective_timeout_s": coll, "watchdog_s": watchdog, "startup_s": max(watchdog, STARTUP_FLOOR_S),
            "first": "watchdog" if watchdog < coll else "collective"}


def plan_json(lp: LaunchPlan, resources: dict[str, list[int]], device: str, timeout: float,
              collective_timeout: float | None = None) -> dict:
    """The run's plan.json: what the ranks read (rendezvous, collective timeout) and the record keeps.

    The timeouts are timeouts()'s: collective_timeout_s, which the ranks apply to every process group;
    watchdog_s, how long bench's watchdog waits for progress; startup_s, how long it waits for the first step;
    first_to_fire, which of the two ends a hang. orphan_after_s: how long a rank goes on without bench's
    beat (bench.core.conversation).
    """
    t = timeouts(device, timeout, collective_timeout)
    return {"world_size": sum(len(s) for s in resources.values()), "nodes": len(resources),
            "resources": resources, "launcher": lp.launcher, "device": device, "master_addr": lp.master_addr,
            "master_port": lp.master_port, "collective_timeout_s": t["collective_timeout_s"],
            "watchdog_s": t["watchdog_s"], "startup_s": t["startup_s"], "first_to_fire": t["first"],
            "command": lp.argv, "gpu_by": lp.gpu_by, "container": lp.container, "accel": lp.accel,
            "orphan_after_s": conversation.ORPHAN_AFTER_S}


def hostfile_text(slots: dict[str, int]) -> str:
    return "".join(f"{h} slots={n}\n" for h, n in slots.items())


def write_files(plan: LaunchPlan, resources: dict[str, list[int]], slots_of: dict[str, int] | None) -> None:
    """The resolved hostfile and the .deepspeed_env (KEY=VALUE lines only)."""
    if plan.hostfile:
        kind = get(plan.launcher)
        counts = {h: (slots_of or {}).get(h, max(s) + 1) if kind.lists_every_slot else len(s)
                  for h, s in resources.items()}
        with open(plan.hostfile, "w") as f:
            f.write(hostfile_text(counts))
    if plan.env_file:
        with open(plan.env["DS_ENV_FILE"], "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in plan.env_file.items()))
    for path, text in plan.files.items():
        with open(path, "w") as f:
            f.write(text)
