"""One node's ranks, started and watched by bench: what DeepSpeed's launch.py does for a node, in the standard library.

    python -u -m bench.launch.node --world-info B64 --node-rank 1 --master-addr A --master-port P \\
        [--accel amd] bench.worker --run-dir RUN_DIR

The world is DeepSpeed's --world_info (base64 JSON of {host: slots}, hosts in
rank order), and each rank gets what DeepSpeed's launch.py (0.19.8) gives it:
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE, MASTER_ADDR,
MASTER_PORT, and the visible-devices variable of the nodes' backend set to the
node's slots: --accel names the backend (the launch plan takes it from the
nodes' inventories: bench.cluster.hetero's verdict "accel"), so ranks on an AMD
node get AMD's variable; without it, or for the CPU backend, which has none,
the first GPU backend's (bench.core.accel_names.ranks_visible_env; DeepSpeed's
CPU accelerator sets that one for CPU ranks too). Every other visible-devices
variable this process has is dropped from the ranks' environment: the slots
name the node's devices once (a ROCm runtime reads three such variables and
narrows one's list by the others). What differs, and why:

- no torch and no DeepSpeed are imported here: launch.py spends 2.5 s of a
  core on them, on every node of every launch, before any rank starts;
- every rank's end is said by its rank, `rank 1 pid 4242 ended by SIGKILL`
  (bench.launch.exits reads it): launch.py 0.19.8 names the last command it
  spawned, not the rank that failed;
- as launch.py, the first rank that fails stops the node's others (SIGTERM to
  each rank and its children, SIGKILL after GRACE_S) and the node exits with
  that rank's status (128 + N for signal N); SIGTERM or SIGINT to this process
  stops the ranks the same way, status 1. The ranks stay in this process's
  group: bench stops a local launch by its process group (bench.launch.execute).

Ranks that are runs of their own (bench validate's per-GPU run, the numerics
job: plan.json "independent") start with --independent: a rank that fails
stops nothing, the others run to their end, and the node's status is the
first failed rank's once all have ended.

    python -u -m bench.launch.node --alone bench.worker --run-dir RUN_DIR

--alone watches the one rank this process stands for, in the environment its
own launcher gave it (mpirun's OMPI_COMM_WORLD_*): its end said in the same
words, its status as a shell says it, so this process never ends by a signal.
Open MPI 4.1.4 told not to abort on a non-zero exit (bench.launch.openmpi)
waits forever for a rank a signal ended (tried: `orte_abort_on_non_zero_status
0`, one of three ranks SIGKILLed, mpirun still running after 30 s).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import time

from bench.core.accel_names import VISIBLE_ENVS, ranks_visible_env, vendor

GRACE_S = 30.0   # as launch.py: how long a stopped rank has before SIGKILL
POLL_S = 0.2
PREFIX = "[bench.launch.node]"


def say(text: str) -> None:
    """One line to the launcher's log; a closed pipe (pdsh gone) does not stop the node."""
    try:
        print(f"{PREFIX} {text}", flush=True)
    except (OSError, ValueError):
        pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.launch.node")
    p.add_argument("--world-info", help="base64 JSON {host: [slot, ...]}, hosts in rank order")
    p.add_argument("--node-rank", type=int, default=0, help="this node's index among the world's hosts")
    p.add_argument("--master-addr")
    p.add_argument("--master-port", type=int)
    p.add_argument("--independent", action="store_true", help="a failed rank stops none of the others")
    p.add_argument("--alone", action="store_true", help="one rank, in the environment this process has")
    p.add_argument("--accel", help="the nodes' accelerator backend (bench/data/accelerators.json): its "
                   "visible-devices variable is set to the slots")
    p.add_argument("module", help="the ranks' entry point, run as python -u -m MODULE")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if not a.alone and (a.world_info is None or a.master_addr is None or a.master_port is None):
        p.error("--world-info, --master-addr and --master-port are required (or --alone)")
    if a.accel is not None:
        try:
            vendor(a.accel)
        except KeyError as e:
            p.error(f"--accel: {e.args[0]}")
    return a


def rank_envs(world: dict[str, list[int]], node_rank: int, master_addr: str, master_port: int,
              environ: dict[str, str], accel: str | None = None) -> list[dict[str, str]]:
    """The environment of each of this node's ranks, in local-rank order (launch.py's numbering); accel: the
    nodes' backend, whose visible-devices variable holds the slots (see the module docstring)."""
    hosts = list(world)
    slots = world[hosts[node_rank]]
    first = sum(len(world[h]) for h in hosts[:node_rank])
    kept = {k: v for k, v in environ.items() if k not in VISIBLE_ENVS}
    common = dict(kept, MASTER_ADDR=master_addr, MASTER_PORT=str(master_port),
                  WORLD_SIZE=str(sum(len(s) for s in world.values())), CROSS_RANK=str(node_rank),
                  CROSS_SIZE=str(len(hosts)), LOCAL_SIZE=str(len(slots)),
                  **{ranks_visible_env(accel): ",".join(str(s) for s in slots)})
    return [dict(common, RANK=str(first + i), LOCAL_RANK=str(i)) for i in range(len(slots))]


def _stat(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None: no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _tree(pid: int) -> dict[int, str]:
    """pid and its descendants (from /proc), each with its start time: what identifies it against PID reuse."""
    stats = {int(e): st for e in os.listdir("/proc") if e.isdigit() and (st := _stat(e)) is not None}
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            out[p] = stats[p][19]  # starttime, in clock ticks since boot
            todo.extend(c for c, st in stats.items() if int(st[1]) == p)  # st[1]: the parent's PID
    return out


def _signal(pids: dict[int, str], sig: signal.Signals) -> None:
    """sig to each process that is still the one recorded (same PID, same start time)."""
    for pid, started in pids.items():
        st = _stat(pid)
        if st is not None and st[19] == started:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def stop(procs: list[subprocess.Popen], grace: float = GRACE_S) -> None:
    """SIGTERM every rank still running and its children; SIGKILL what is left of them after `grace` s."""
    live = [p for p in procs if p.poll() is None]
    pids = {pid: started for p in live for pid, started in _tree(p.pid).items()}
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in live) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    _signal(pids, signal.SIGKILL)
    for p in live:
        p.wait()


def ended(rc: int) -> str:
    """How a rank ended, as the log line says it: `exited with N` or `ended by SIGNAME`."""
    if rc < 0:
        try:
            return f"ended by {signal.Signals(-rc).name}"
        except ValueError:
            return f"ended by signal {-rc}"
    return f"exited with {rc}"


def status(rc: int) -> int:
    """The node's exit status for a rank's return code: a signal N is 128 + N, as a shell says it."""
    return 128 - rc if rc < 0 else rc


def launched(environ: dict[str, str]) -> tuple[str, str]:
    """(rank, local rank) that this process's launcher gave it (--alone), read as the ranks read them
    (bench.worker.bootstrap); the rank's environment is left as it is."""
    for rank, local in (("RANK", "LOCAL_RANK"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
                        ("SLURM_PROCID", "SLURM_LOCALID")):
        if rank in environ:
            return environ[rank], environ.get(local, "0")
    return "?", "?"


def run(argv: list[str]) -> int:
    a = parse_args(argv)
    if a.alone:
        envs, names = [dict(os.environ)], [launched(dict(os.environ))]
    else:
        world = json.loads(base64.urlsafe_b64decode(a.world_info))
        envs = rank_envs(world, a.node_rank, a.master_addr, a.master_port, dict(os.environ), a.accel)
        names = [(env["RANK"], env["LOCAL_RANK"]) for env in envs]
    stopped: list[int] = []

    def on_signal(signum, frame):
        stopped.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    procs: list[subprocess.Popen] = []
    for env, (rank, local) in zip(envs, names):
        cmd = [sys.executable, "-u", "-m", a.module, *a.args]
        procs.append(subprocess.Popen(cmd, env=env))
        say(f"rank {rank} (local rank {local}) pid {procs[-1].pid} started")
    rank_of = {p.pid: rank for p, (rank, _) in zip(procs, names)}
    said: set[int] = set()
    failed: int | None = None
    failed_rank = ""
    while True:
        for p in procs:
            if p.poll() is not None and p.pid not in said:
                said.add(p.pid)
                say(f"rank {rank_of[p.pid]} pid {p.pid} {ended(p.returncode)}")
                if p.returncode != 0 and failed is None and not stopped:
                    failed, failed_rank = p.returncode, rank_of[p.pid]
        # Independent ranks: a failed one stops nothing; a signal to this process still stops them all.
        by_signal = bool(stopped) and (failed is None or a.independent)
        if by_signal or (failed is not None and not a.independent):
            why = signal.Signals(stopped[0]).name if by_signal else f"after rank {failed_rank} failed"
            stop(procs)
            for p in procs:
                if p.pid not in said:  # not "ended by": the cause is elsewhere (bench.launch.exits)
                    said.add(p.pid)
                    say(f"rank {rank_of[p.pid]} pid {p.pid} stopped by this launcher ({why}): {ended(p.returncode)}")
            if by_signal:
                say(f"stopped by {why}")
                return 1
            return status(failed)
        if len(said) == len(procs):
            return status(failed) if failed is not None else 0
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
