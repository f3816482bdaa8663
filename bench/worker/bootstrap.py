"""The one way a rank starts and ends, for training ranks and comm ranks alike.

    def run(run_dir: str, rank: int) -> str: ...     # the rank's work; returns its "is OK" detail
    sys.exit(rank_main("bench.worker", run))

A rank started by DeepSpeed's launcher (local, pdsh, openmpi, slurm):
  - finds its rank (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID),
  - sends its stdout and stderr to logs/rank<R>.log in the run dir,
  - records "<hostname> <pid>" in ranks/pid-<R> (bench stops ranks by these
    PIDs, never by pattern), and dials bench (bench.core.conversation): its
    hello, start, barriers and end go over that connection, not the shared directory,
  - runs, then prints `[host:rank] is OK: ...` and exits with os._exit(0); or, on any failure, writes
    ranks/rank<R>.json with status failed or oom and the error, prints
    `[host:rank] is broken: ...`, and exits at once with os._exit (1, or 3
    for OOM): the destructors of a process group whose peer died can block
    interpreter shutdown for ever (seen with gloo), and the launcher, and so
    the whole job, would wait on this process,
  - exits (4) as soon as its connection to bench closes or bench stops
    beating: bench itself is gone,
  - answers bench's stack request (a run that hangs) with every thread's
    stack and its position: step, collective number (bench.worker.stall).
Results never travel through stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import traceback
from typing import Callable, NoReturn

from bench.core.conversation import phone
from bench.core.errors import StorageFailed
from bench.core.placement import gpu_index
from bench.core.results import write_json_atomic, write_text_atomic
from bench.core.storage import subdir
from bench.worker.position import POSITION

EXIT_ORPHANED = 4  # bench died: the launcher on this node ends as for any rank that fails
_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_LOCAL_RANK_ENV = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
# How many ranks share this node, as each launcher says it: DeepSpeed's launch.py, torchrun, mpirun, srun.
_LOCAL_SIZE_ENV = ("LOCAL_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
# What set_threads chose for this rank (the rank record carries it).
THREADS: dict = {}


def env_rank() -> int:
    return env_rank_of(os.environ)


def _first_number(environ, names: tuple[str, ...]) -> int:
    """The first of these variables that holds a whole number, else 0."""
    for name in names:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return 0


def env_rank_of(environ) -> int:
    return _first_number(environ, _RANK_ENV)


def env_local_rank() -> int:
    return env_local_rank_of(os.environ)


def env_local_rank_of(environ) -> int:
    return _first_number(environ, _LOCAL_RANK_ENV)


def bind_device(visible: int, plan: dict | None = None, environ=None) -> tuple[int, int]:
    """(the launcher's local rank, the GPU index this rank takes), LOCAL_RANK rewritten to that index.

    The index is bench.core.placement.gpu_index: the local rank where the node launcher showed the node only
    its selected GPUs, the rank's slot where it sees every GPU of the node (mpirun, srun). Under srun
    --gpus-per-task=1 each task sees one GPU, cuda:0, while SLURM_LOCALID counts the node's tasks. DeepSpeed
    reads LOCAL_RANK as a device index in three places (0.19.8): init_process_group's device_id
    (deepspeed/comm/torch.py, which torch's distributed_c10d refuses as "out of range"), the engine's
    set_device(self.local_rank) (runtime/engine.py) and PipelineModule's .to(local_rank)
    (runtime/pipe/module.py). So LOCAL_RANK must already be the index when DeepSpeed starts; the launcher's
    value stays in the record. OMPI_COMM_WORLD_LOCAL_RANK follows it: the engine asserts the two agree.
    """
    environ = os.environ if environ is None else environ
    local = env_local_rank_of(environ)
    index = gpu_index(plan or {}, env_rank_of(environ), local, visible)
    environ["LOCAL_RANK"] = str(index)
    if "OMPI_COMM_WORLD_LOCAL_RANK" in environ:
        environ["OMPI_COMM_WORLD_LOCAL_RANK"] = str(index)
    return local, index


def mark_started(run_dir: str, rank: int) -> None:
    """This rank begins its first measured phase (its imports and device done): said to bench (once it counts),
    so the launch side can tell the launch's start-up apart from its checks."""
    if phone.CURRENT is not None:
        phone.CURRENT.started()


def progress(run_dir: str, doc: dict) -> None:
    """Where this rank is (step, total, time): told bench over its phone, which keeps progress.json for a person
    (one writer, not one per rank: an independent launch's ranks all report); a rank without bench writes it."""
    if phone.CURRENT is not None:
        phone.CURRENT.progress(doc)
    else:
        write_json_atomic(os.path.join(run_dir, "progress.json"), doc)


def set_threads(device: str, environ=None, cpus: int | None = None) -> dict:
    """OMP_NUM_THREADS of this rank, set before torch (and its OpenMP) loads; returns what and why.

    Set where bench ran, or by bench for CPU ranks (one each, bench.launch.environment): kept. A GPU
    rank without it gets the cores it may use (SLURM_CPUS_PER_TASK, else its CPU affinity) over the
    ranks of its node: ZeRO-Offload's AdamW steps on the CPU, and one thread of a 64-core node would
    make every offload point look slower than it is.
    """
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS"):
        why = "one per CPU rank (bench's default)" if device == "cpu" else "set where bench ran"
        return {"omp_num_threads": environ["OMP_NUM_THREADS"], "why": f"{why}, kept"}
    if device != "cuda":
        return {"omp_num_threads": None, "why": "not set: the OpenMP runtime's default"}
    local = next((int(environ[k]) for k in _LOCAL_SIZE_ENV if environ.get(k, "").isdigit()), 1)
    if environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        n, why = int(environ["SLURM_CPUS_PER_TASK"]), "SLURM_CPUS_PER_TASK (the cores Slurm gave this task)"
    else:
        cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
        n, why = max(1, cpus // max(local, 1)), f"GPU run: {cpus} cores / {local} rank(s) on this node"
    environ["OMP_NUM_THREADS"] = str(n)
    return {"omp_num_threads": str(n), "why": why}


def map_launcher_env(plan: dict) -> None:
    """Give torch.distributed its variables under mpirun and srun too.

    DeepSpeed's openmpi and slurm runners start the ranks without RANK,
    WORLD_SIZE, LOCAL_RANK and MASTER_ADDR; DeepSpeed would then discover
    them through mpi4py. Mapping them here needs no MPI in Python, and the
    rendezvous address is the one bench planned (--master-addr).
    """
    env = os.environ
    if "RANK" in env:
        return
    for rank, size, local in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                              ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")):
        if rank in env:
            env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"] = env[rank], env[size], env.get(local, "0")
            env.setdefault("MASTER_ADDR", plan["master_addr"])
            env.setdefault("MASTER_PORT", str(plan["master_port"]))
            return


def redirect_output(run_dir: str, rank: int) -> None:
    fd = os.open(os.path.join(subdir(run_dir, "logs"), f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def is_oom(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}"
    return ("OutOfMemoryError" in text or "out of memory" in text
            or "can't allocate memory" in text or isinstance(e, MemoryError))


def _guard(run_dir: str, rank: int, host: str) -> None:
    """Dial bench; exit when the connection to it closes or it stops beating (bench.core.conversation)."""
    try:
        with open(os.path.join(run_dir, "plan.json")) as f:
            after = json.load(f).get("orphan_after_s")
    except (OSError, ValueError):
        after = None

    def orphaned(why: str) -> None:
        with contextlib.suppress(OSError):
            print(f"[{host}:{rank}] is orphaned: {why}; exiting", flush=True)
        # Where it was (the collective it waited in, when its node's link is gone): for bench, if it is still
        # there to read it, and for a person.
        with contextlib.suppress(Exception):
            write_json_atomic(os.path.join(run_dir, "ranks", f"rank{rank}.json"), {
                "rank": rank, "host": host, "status": "failed", "error": f"Orphaned: {why}",
                "at": POSITION.snapshot()})
        os._exit(EXIT_ORPHANED)

    def asked(request: str, send) -> None:
        from bench.worker import stall  # only when bench asks: a rank that never hangs never imports it
        stall.answer(run_dir, rank, host, request, send)

    try:
        phone.CURRENT = phone.Phone.dial(run_dir, rank, host)
    except OSError as e:  # bench cannot be told: the report orphaned() writes says why
        orphaned(str(e))
    if phone.CURRENT is not None:
        kw = {"orphan_after_s": float(after)} if isinstance(after, (int, float)) and after > 0 else {}
        phone.CURRENT.listen(orphaned, asked, **kw)


def rank_main(prog: str, run: Callable[[str, int], str], argv: list[str] | None = None) -> NoReturn:
    """Start a rank of the run dir given by --run-dir, run `run(run_dir, rank)`, and report how it ended."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--run-dir", required=True)
    args, _ = p.parse_known_args(argv)  # a launcher may append --local_rank=N (DeepSpeed's launch.py does)
    run_dir, rank, host = args.run_dir, env_rank(), socket.gethostname()
    redirect_output(run_dir, rank)
    write_text_atomic(os.path.join(subdir(run_dir, "ranks"), f"pid-{rank}"), f"{host} {os.getpid()}\n")
    _guard(run_dir, rank, host)
    try:
        with open(os.path.join(run_dir, "plan.json")) as f:
            plan = json.load(f)
    except (OSError, ValueError):
        plan = {}
    device = plan.get("device", "cpu")
    THREADS.update(set_threads(device))  # before `run` imports torch
    image = os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")
    print(f"[{host}:{rank}] {prog} pid {os.getpid()} starting" + (f" in container {image}" if image else ""),
          flush=True)
    try:
        detail = run(run_dir, rank)
    except BaseException as e:  # noqa: BLE001 - report every failure of this rank, then exit non-zero
        status = "oom" if is_oom(e) else "failed"
        # The log may be on the disk that just filled: no write here may keep this rank from exiting.
        with contextlib.suppress(OSError):
            traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        report = {"rank": rank, "host": host, "status": status, "error": f"{type(e).__name__}: {first}",
                  "at": POSITION.snapshot()}  # where it was: the collective that timed out, if one did
        if phone.CURRENT is not None:  # bench has it at once (and its barriers stop waiting for this rank)
            phone.CURRENT.done(status, report)
        try:
            write_json_atomic(os.path.join(run_dir, "ranks", f"rank{rank}.json"), report)
        except StorageFailed as why:  # the launcher diagnoses the storage itself (bench.core.storage.problem)
            with contextlib.suppress(OSError):
                print(f"[{host}:{rank}] could not write its report: {why}", flush=True)
        with contextlib.suppress(OSError):
            print(f"[{host}:{rank}] is broken: {type(e).__name__}: {e}", flush=True)
            sys.stderr.flush()
        os._exit(3 if status == "oom" else 1)
    if phone.CURRENT is not None:  # after its figures are written, fsynced and renamed: bench reads them by name
        phone.CURRENT.done("ok")
    with contextlib.suppress(OSError):  # the figures are written; a full disk here must not fail the rank
        print(f"[{host}:{rank}] is {detail}", flush=True)
        sys.stderr.flush()
    # Everything is written and fsynced: leave without interpreter shutdown. Its C++ destructors (gloo's
    # threads) once aborted a rank that had reported OK ("terminate called without an active exception",
    # exit -6), and the launcher then called a finished run failed.
    os._exit(0)
