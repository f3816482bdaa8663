"""The run directory's file system: enough room before a run, and what went wrong with it after one.

    check_room(root, ranks)        # BadInput when --out is clearly too small for a run
    read_only(path)                # its file system is mounted read-only
    problem(run_dir)               # "the run directory was removed during the run", "... full", or None
    subdir(run_dir, "logs")        # run_dir/logs, made if missing; never run_dir itself

"Clearly too small" is a floor, not an estimate: what every run writes
whatever its length, counted in the 4 KiB blocks a file takes at least.
Counted as 8 blocks for the run (config, plan, DeepSpeed config, launcher
log, progress, summary, record, hostfile) and 4 per rank (log, pid file,
rank record, its temporary): 48 KiB for one rank, 64 KiB for two. Measured
(`bench --gpus 2 --dataset synthetic --model vit-micro-p4-32 --steps 6` on
CPU): 13 files, 60-64 KiB in blocks at the end (plus bench's hub.json and ranks.json); on a 64 KiB tmpfs it finishes (94% used), on a 40 KiB one
it is refused: below the floor a run cannot finish. Longer runs write more
(the log grows per step), so passing the floor is no promise.
"""

from __future__ import annotations

import errno
import os

from bench.core.errors import NoRoom, StorageFailed

BLOCK = 4096
RUN_BLOCKS, RANK_BLOCKS = 8, 4


def floor_bytes(ranks: int) -> int:
    return (RUN_BLOCKS + RANK_BLOCKS * max(ranks, 1)) * BLOCK


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on path's file system (statvfs f_bavail), None if unknown."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def read_only(path: str) -> bool:
    """Whether path's file system is mounted read-only (statvfs ST_RDONLY); False when that cannot be known."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def existing(path: str) -> str:
    """path, or its nearest existing parent (--out may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check_room(root: str, ranks: int, option: str = "--out") -> None:
    """Refuse a results root whose file system is read-only or cannot hold the smallest run of this many ranks."""
    where = existing(root)
    if read_only(where):
        raise NoRoom(f"{option}: {root} is on a read-only file system: give a writable {option}", root, 0)
    free, need = free_bytes(where), floor_bytes(ranks)
    if free is not None and free < need:
        raise NoRoom(f"{option}: {root} has {free // 1024} KiB free; a {ranks}-rank run writes at least "
                     f"{need // 1024} KiB (config, plan, logs, rank records, the result record): "
                     f"free some space or give another {option}", root, free)


def problem(run_dir: str) -> str | None:
    """What is wrong with the run directory's storage now, in a phrase, or None when nothing is seen."""
    if not os.path.isdir(run_dir):
        return f"the run directory {run_dir} was removed during the run"
    try:
        st = os.statvfs(run_dir)
    except OSError as e:
        return f"the run directory {run_dir} cannot be read ({e.strerror})"
    if st.f_flag & os.ST_RDONLY:
        return f"the file system of {run_dir} is read-only"
    if st.f_bavail * st.f_frsize < BLOCK * RANK_BLOCKS:
        return f"the file system of {run_dir} is full ({st.f_bavail * st.f_frsize // 1024} KiB free)"
    return None


def subdir(run_dir: str, name: str) -> str:
    """run_dir/name, made if missing. run_dir itself must exist: one removed mid-run is not made again."""
    path = os.path.join(run_dir, name)
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except OSError as e:
        why = "the run directory is gone" if e.errno == errno.ENOENT else (e.strerror or str(e))
        raise StorageFailed(path, why) from None
    return path
