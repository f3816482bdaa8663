"""What ranks and the launch side share about an accelerator vendor, without naming any in code.

    from bench.core.accel_names import vendor, visible_devices, by_device, VISIBLE_ENVS
    vendor("nvidia")["collective_backend"]     # "nccl"
    by_device("cuda")["visible_devices_env"]   # the variable that picks a CUDA process's GPUs
    visible_devices(os.environ)                # that variable's value where one is set, else None
    VISIBLE_ENVS                               # every backend's visible-devices variable (launchers drop them)
    ranks_visible_env("amd")                   # AMD's variable: what a node's launcher sets to its slots

The figures live in bench/data/accelerators.json, one entry per backend
(bench/cluster/accel/<name>/ is the node side of each): ranks import
bench.core only, so the variable a rank reads, the collective backend it
starts and the sampler's words come from here, and the backends take
theirs from the same table. Import-light (json and the standard library).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Mapping


@functools.cache
def table() -> dict[str, dict]:
    """{backend name: its entry}, as bench/data/accelerators.json gives it."""
    with resources.files("bench").joinpath("data", "accelerators.json").open() as f:
        return json.load(f)["backends"]


def names() -> tuple[str, ...]:
    """The backends bench knows, in the table's order."""
    return tuple(table())


def vendor(name: str) -> dict:
    """One backend's entry; KeyError names the known ones."""
    try:
        return table()[name]
    except KeyError:
        raise KeyError(f"no accelerator backend {name!r} (known: {', '.join(table())})") from None


def by_device(device: str) -> dict:
    """The entry of the backend whose torch device type is `device` ("cuda", "cpu"); the first such."""
    for entry in table().values():
        if entry["device"] == device:
            return entry
    raise KeyError(f"no accelerator backend for device {device!r}")


def visible_env(device: str) -> str | None:
    """The variable that picks a process's devices of type `device`; None where there is none (cpu)."""
    return by_device(device)["visible_devices_env"]


def visible_devices(environ: Mapping[str, str]) -> str | None:
    """The first visible-devices variable set in `environ`, its value; None where none is."""
    for name in VISIBLE_ENVS:
        if environ.get(name) is not None:
            return environ[name]
    return None


def ranks_visible_env(name: str | None) -> str:
    """The variable a node's launcher sets to the node's slots for ranks on backend `name`'s devices: the
    backend's own; where it has none (cpu) or none is named, the first GPU backend's (the one DeepSpeed's CPU
    accelerator sets for CPU ranks too, as bench always did)."""
    own = vendor(name)["visible_devices_env"] if name else None
    return own or by_device("cuda")["visible_devices_env"]


# Each backend's variable first, then those its runtime reads too ("also_visible_envs": HIP reads two).
VISIBLE_ENVS: tuple[str, ...] = tuple(dict.fromkeys(
    [e["visible_devices_env"] for e in table().values() if e["visible_devices_env"]]
    + [v for e in table().values() for v in e.get("also_visible_envs", ())]))
# The burn's sampler on GPU ranks, by name ("the sampler" in records' words): what its lines call it.
GPU_SAMPLER: str = by_device("cuda")["sampler"]
GPU_SAMPLER_ABSENT: str = by_device("cuda")["sampler_absent"]
