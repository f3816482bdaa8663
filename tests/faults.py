"""Faults the tests make from outside bench: code on one host's Python path, a CPU quota on one rank.

    with on_one_host(cluster, host, {"sitecustomize.py": perturb_linear(1e-6)}) as site:
        env = dict(cluster.env, PYTHONPATH=site)      # every host's ranks get it; only `host` finds a file there
    with cpu_quota_on(cluster, host, local_rank=1, module="bench.worker", quota_us=5000):
        ...                                             # that rank (and each one started later) at 5% of a core
    with cpu_quota_on(cluster, host, local_rank=None, quota_us=20000, after="start barrier"):
        ...                                             # all its ranks share 0.2 of a core from their first step

bench's own code has no switch that makes it misbehave: a test that needs
a GPU that computes wrong, or a slow GPU, makes one here. The sitecustomize
sources patch torch when it is imported (an import hook), so a process that
never imports torch on that host is untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator

_HOOK = '''\
"""Installed by a vitbench test on one host's path: {what}."""
import importlib.abc
import importlib.machinery
import sys

_TARGET = {target!r}


def _patch(module):
{patch}


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Hook())
'''


def _indent(code: str) -> str:
    return "\n".join("    " + line if line.strip() else "" for line in code.strip("\n").splitlines())


def perturb_linear(eps: float) -> str:
    """Every torch.nn.functional.linear output times (1 + eps): a GPU whose multiply-adds are off by eps."""
    return _HOOK.format(what=f"F.linear's output off by one part in {1 / eps:.0e}", target="torch.nn.functional",
                        patch=_indent(f"""
original = module.linear

def linear(input, weight, bias=None):
    return original(input, weight, bias) * (1.0 + {eps!r})

module.linear = linear
"""))


def block_data_loading(from_batch: int, rank: int | None = None) -> str:
    """bench's batches stop coming from the from_batch-th on (a file system that stopped answering): the
    training thread sleeps in bench.worker.data's crop_flip for an hour. rank: only on that global rank."""
    only = f'os.environ.get("RANK") == "{rank}"' if rank is not None else "True"
    return _HOOK.format(what=f"data loading blocks from batch {from_batch}" + (f" on rank {rank}" if rank is not None
                                                                                else ""),
                        target="bench.worker.data", patch=_indent(f"""
import os
import time

original = module.crop_flip
calls = [0]

def crop_flip(*args, **kwargs):
    calls[0] += 1
    if calls[0] >= {from_batch} and {only}:
        time.sleep(3600)
    return original(*args, **kwargs)

module.crop_flip = crop_flip
"""))


def corrupt_all_reduce(rank: int) -> str:
    """On global rank `rank`, the first element of every all_reduce input is off by one before it is sent."""
    return _HOOK.format(what=f"rank {rank} sends one wrong value in every all_reduce",
                        target="torch.distributed.distributed_c10d", patch=_indent(f"""
import os

original = module.all_reduce

def all_reduce(tensor, *args, **kwargs):
    if os.environ.get("RANK") == "{rank}":
        tensor.view(-1)[0] += 1
    return original(tensor, *args, **kwargs)

module.all_reduce = all_reduce
"""))


@contextlib.contextmanager
def on_one_host(cluster, host: str, files: dict[str, str]) -> Iterator[str]:
    """A directory every host has (empty) and only `host` sees `files` in: its sshd restarted with a bind mount.

    Put the directory on PYTHONPATH of the launch: bench's pdsh and mpirun commands export it to every rank.
    """
    shared = tempfile.mkdtemp(prefix="vitbench-site-", dir=str(cluster.tmp))
    own = tempfile.mkdtemp(prefix="vitbench-site-own-", dir=str(cluster.tmp))
    for name, text in files.items():
        with open(os.path.join(own, name), "w") as f:
            f.write(text)
    cluster.stop_sshd(host)
    cluster.start_sshd(host, bind_over=(own, shared))
    try:
        yield shared
    finally:
        cluster.stop_sshd(host)
        cluster.start_sshd(host)
        shutil.rmtree(own, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)


def _rank_of(pid: str, ns_ino: int, module: str, local_rank: int | None) -> list[bytes] | None:
    """/proc/pid's argv if it is a rank of `module` with LOCAL_RANK=local_rank (any, for None) inside the
    namespace ns_ino."""
    try:
        if os.stat(f"/proc/{pid}/ns/net").st_ino != ns_ino:
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if module.encode() not in argv:
            return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        # The launcher's local rank as the process started with it: bench.launch.node sets LOCAL_RANK,
        # srun SLURM_LOCALID, mpirun OMPI_COMM_WORLD_LOCAL_RANK (the rank sets LOCAL_RANK itself later).
        names = (b"LOCAL_RANK=", b"SLURM_LOCALID=", b"OMPI_COMM_WORLD_LOCAL_RANK=")
        if local_rank is None:
            return argv if any(v.startswith(names) for v in env) else None
        return argv if any(v == n + str(local_rank).encode() for v in env for n in names) else None
    except OSError:
        return None


def _logged(pid: str, argv: list[bytes], line: str) -> bool:
    """Whether the rank with this PID has written `line` to its log (bench.worker.bootstrap: the run dir's
    ranks/pid-<R> holds "<host> <pid>", logs/rank<R>.log its output)."""
    try:
        run_dir = argv[argv.index(b"--run-dir") + 1].decode()
        for name in os.listdir(os.path.join(run_dir, "ranks")):
            if name.startswith("pid-"):
                with open(os.path.join(run_dir, "ranks", name)) as f:
                    if f.read().split()[1:2] == [pid]:
                        with open(os.path.join(run_dir, "logs", f"rank{name[4:]}.log")) as log:
                            return line in log.read()
    except (OSError, ValueError, IndexError):
        pass
    return False


@contextlib.contextmanager
def _catching(ns_ino: int, module: str, local_rank: int | None, after: str | None, act, done) -> Iterator[None]:
    """A thread that calls act(pid) on each rank of `module` with this local rank in the namespace ns_ino, as it
    starts or once its log holds `after`, skipping those done(pid) says are handled, until the block ends."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                argv = _rank_of(pid, ns_ino, module, local_rank) if pid.isdigit() and not done(pid) else None
                if argv is not None and (after is None or _logged(pid, argv, after)):
                    act(pid)
            stop.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def cpu_quota_on(cluster, host: str, local_rank: int | None, module: str = "bench.worker", quota_us: int = 5000,
                 period_us: int = 100000, after: str | None = None) -> Iterator[set[str]]:
    """Every rank of `module` with this local rank (None: every rank) on `host` in a cgroup v1 CPU quota of its
    own: as it starts, or once its log holds the line `after` (e.g. "start barrier": its timed steps, not its
    imports, slowed). Ranks caught share the quota.

    Yields the PIDs moved so far. Only processes of that namespace, that module and that LOCAL_RANK are
    touched, and only moved between cgroups (never signalled).
    """
    import pytest

    if not os.path.isdir("/sys/fs/cgroup/cpu"):
        pytest.skip("no cgroup v1 cpu controller here")
    cg = f"/sys/fs/cgroup/cpu/vitbench-test-{os.getpid()}-rank{local_rank}"
    os.makedirs(cg, exist_ok=True)
    for name, value in (("cpu.cfs_period_us", period_us), ("cpu.cfs_quota_us", quota_us)):
        with open(f"{cg}/{name}", "w") as f:
            f.write(str(value))
    ns_ino = os.stat(f"/run/netns/{cluster.ns_of(host)}").st_ino
    moved: set[str] = set()

    def move(pid: str) -> None:
        with contextlib.suppress(OSError), open(f"{cg}/cgroup.procs", "w") as f:
            f.write(pid)
            moved.add(pid)

    try:
        with _catching(ns_ino, module, local_rank, after, move, lambda pid: pid in moved):
            yield moved
    finally:
        with open(f"{cg}/cgroup.procs") as f:
            left = f.read().split()
        for pid in left:
            with contextlib.suppress(OSError), open("/sys/fs/cgroup/cpu/cgroup.procs", "w") as f:
                f.write(pid)
        with contextlib.suppress(OSError):
            os.rmdir(cg)



@contextlib.contextmanager
def sigstop_on(cluster, host: str, local_rank: int = 0, module: str = "bench.worker",
               after: str = "start barrier") -> Iterator[list[int]]:
    """The first rank of `module` with this local rank on `host` SIGSTOPped once its log holds `after` (e.g.
    "start barrier": stopped while it trains, as a GPU that stops answering). Yields the PIDs stopped (one at
    most). At the end each is sent SIGCONT (bench's cleanup has killed it by PID by then; a rank still alive
    goes on rather than staying stopped)."""
    import signal

    ns_ino = os.stat(f"/run/netns/{cluster.ns_of(host)}").st_ino
    stopped: list[int] = []

    def halt(pid: str) -> None:
        with contextlib.suppress(OSError):
            os.kill(int(pid), signal.SIGSTOP)
            stopped.append(int(pid))

    try:
        with _catching(ns_ino, module, local_rank, after, halt, lambda pid: bool(stopped)):
            yield stopped
    finally:
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)


def exit_at_import(module: str = "bench.worker", status: int = 3, hostname: str | None = None) -> str:
    """A process that imports `module` exits at once with `status`: ranks that cannot start (a broken install on
    one node), while the node's preflight and inventory, which never import it, still answer. hostname: only on
    the host of that name, for a path every host sees (the Slurm nodes' steps come from slurmd, not from the sshd
    that on_one_host restarts with its own mount)."""
    where = f" on {hostname}" if hostname else ""
    only = f"socket.gethostname() == {hostname!r}" if hostname else "True"
    return _HOOK.format(what=f"{module} exits at import (status {status}){where}", target=module, patch=_indent(f"""
import os
import socket
if {only}:
    os._exit({status})
"""))
