"""Keep a test's ranks off the machine-wide JIT extension cache.

DeepSpeed JIT-builds deepspeed_shm_comm into TORCH_EXTENSIONS_DIR, and every
rank of every run on the machine takes torch's lock there, even when the
build is a no-op. Concurrent runs that build with other flags (another venv,
a container sharing ~/.cache) rebuild it in turn (~2 min on busy cores) and
hold every other run's ranks at init_distributed meanwhile, which a fault
test would misread as the fault. A private copy of a finished build (mtimes
kept, so ninja has nothing to do) gives a test its own lock. The copy is
then loaded once with the ranks' environment, so that a cache last built
by another toolchain is rebuilt here, outside any limit the test sets (a
compiler in a 3 GiB memory cgroup is OOM-killed), not inside a rank.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time

from bench.launch import rank_environment

_WAIT_S = 600.0


def private_torch_extensions(dest: str) -> str:
    """Copy the shared extension cache to dest (while no build runs there), load it once; return dest."""
    src = rank_environment("cpu", dict(os.environ))["TORCH_EXTENSIONS_DIR"]
    os.makedirs(dest, exist_ok=True)
    if os.path.isdir(src):
        _copy_finished(src, dest)
    env = dict(os.environ, **rank_environment("cpu", dict(os.environ, TORCH_EXTENSIONS_DIR=dest)))
    subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, check=True, timeout=_WAIT_S,
                   stdin=subprocess.DEVNULL)
    return dest


_LOAD = ("from deepspeed.accelerator import get_accelerator; "
         "get_accelerator().create_op_builder('ShareMemCommBuilder').load()")


def _copy_finished(src: str, dest: str) -> None:
    for name in sorted(os.listdir(src)):
        build = os.path.join(src, name)
        lock = os.path.join(build, "lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + _WAIT_S
            while True:
                try:
                    # torch's FileLock is an exclusive flock: holding it, no build is half done.
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            shutil.copytree(build, os.path.join(dest, name), ignore=shutil.ignore_patterns("lock"),
                            dirs_exist_ok=True)
        finally:
            os.close(fd)
