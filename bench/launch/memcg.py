"""How many processes the kernel's OOM killer ended in bench's own memory cgroup.

    before = oom_kills()          # None: no memory cgroup of our own to ask
    ... run ...
    if before is not None and (oom_kills() or 0) > before: a process of this job was OOM-killed

A rank whose batch does not fit in host memory rarely sees a MemoryError:
Linux overcommits, the allocation succeeds, and the OOM killer SIGKILLs the
rank when the pages are touched. The rank then writes nothing; the only
trace is the cgroup's counter. cgroup v1 keeps it as `oom_kill N` in
memory.oom_control, v2 in memory.events. The root cgroup is never asked:
its count covers every process on the machine, and a kill elsewhere must not
be blamed on this run.
"""

from __future__ import annotations

import os

_V1 = "/sys/fs/cgroup/memory"
_V2 = "/sys/fs/cgroup"
# cgroup v1 writes this (PAGE_COUNTER_MAX pages) when there is no limit.
_V1_UNLIMITED = 1 << 62


def _own_dir(proc_cgroup: str = "/proc/self/cgroup") -> tuple[str, str] | None:
    """(directory of our memory cgroup, 'v1' or 'v2'), or None in the root or without one."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    v2_path = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return (os.path.join(_V1, path.lstrip("/")), "v1") if path != "/" else None
        if controllers == "":
            v2_path = path
    if v2_path and v2_path != "/" and os.path.isfile(os.path.join(_V2, v2_path.lstrip("/"), "memory.events")):
        return os.path.join(_V2, v2_path.lstrip("/")), "v2"
    return None


def _field(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        return None
    return None


def oom_kills() -> int | None:
    """OOM kills counted in our memory cgroup so far; None when there is none to ask."""
    own = _own_dir()
    if own is None:
        return None
    path, version = own
    if version == "v1":
        return _field(os.path.join(path, "memory.oom_control"), "oom_kill")
    return _field(os.path.join(path, "memory.events"), "oom_kill")


def describe() -> str:
    """'memory cgroup /x (limit 2.0 GiB)' for a diagnosis; '' when there is none."""
    own = _own_dir()
    if own is None:
        return ""
    path, version = own
    limit = None
    try:
        with open(os.path.join(path, "memory.limit_in_bytes" if version == "v1" else "memory.max")) as f:
            text = f.read().strip()
        limit = None if text == "max" or int(text) >= _V1_UNLIMITED else int(text)
    except (OSError, ValueError):
        pass
    name = "/" + os.path.relpath(path, _V1 if version == "v1" else _V2)
    return f"memory cgroup {name}" + (f" (limit {limit / 2**30:.1f} GiB)" if limit else "")


def system_oom_kills() -> int | None:
    """The machine's OOM kills so far (/proc/vmstat): a hint only, others' kills count too."""
    return _field("/proc/vmstat", "oom_kill")
