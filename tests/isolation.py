"""Keep a test's ranks off the machine-wide JIT extension cache.

DeepSpeed JIT-builds deepspeed_shm_comm into TORCH_EXTENSIONS_DIR, and every
rank of every run on the machine takes torch's lock there, even when the
build is a no-op. Concurrent runs that build with other flags (another venv,
a container sharing ~/.cache) rebuild it in turn (~2 min on busy cores) and
hold every other run's ranks at init_distributed meanwhile, which a fault
test would misread as the fault. A private copy of a finished build (mtimes
kept, so ninja has nothing to do) gives a test its own lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time

from bench.launch import rank_environment

_WAIT_S = 600.0


def private_torch_extensions(dest: str) -> str:
    """Copy the shared extension cache to dest while no build runs there; return dest."""
    src = rank_environment("cpu", dict(os.environ))["TORCH_EXTENSIONS_DIR"]
    os.makedirs(dest, exist_ok=True)
    if not os.path.isdir(src):
        return dest
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
    return dest
