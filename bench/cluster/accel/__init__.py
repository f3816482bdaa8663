"""accel: one backend per accelerator vendor behind one interface (base.Accelerator); imports core and cluster.

    from bench.cluster.accel import backend, detect, names
    backend("nvidia").visible_devices_env       # the variable that picks a rank's GPUs
    detect(probe_output)                        # the backend a probed node needs: its vendor's, else "cpu"
    detect()                                    # the same, asking this node now (each backend's detect())

A backend is a module or package bench.cluster.accel.<name> with a class
that subclasses base.Accelerator; REGISTRY names them, in the order detect()
asks them, the CPU backend last (it claims every node no other does). They
are imported when first asked for, so importing this package reads no tool
and loads no vendor library. The figures ranks need too are in
bench.core.accel_names (bench/data/accelerators.json).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Mapping

from bench.cluster.accel.base import Accelerator, Detection, Links, Sampler

# name -> "module:Class"; detect() asks them in this order, cpu last (register() puts a new one first).
REGISTRY: dict[str, str] = {
    "nvidia": "bench.cluster.accel.nvidia:Nvidia",
    "amd": "bench.cluster.accel.amd:Amd",
    "cpu": "bench.cluster.accel.cpu:Cpu",
}

__all__ = ["REGISTRY", "Accelerator", "Detection", "Links", "Sampler", "backend", "detect", "inventory",
           "local_detection", "names", "register", "vendors"]


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def register(name: str, where: str) -> None:
    """Add a backend ("module:Class"), asked first: NVIDIA's claims any GPUs no backend before it claims, and
    the CPU backend stays last. A name already known is replaced."""
    rest = {k: v for k, v in REGISTRY.items() if k != name}
    REGISTRY.clear()
    REGISTRY.update({name: where, **rest})
    backend.cache_clear()


def vendors() -> tuple[Accelerator, ...]:
    """Every backend but the CPU one, in the order detect() asks them."""
    return tuple(backend(n) for n in REGISTRY if n != "cpu")


@functools.cache
def backend(name: str) -> Accelerator:
    """The backend called `name`; KeyError names the known ones."""
    if name not in REGISTRY:
        raise KeyError(f"no accelerator backend {name!r} (known: {', '.join(REGISTRY)})")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def detect(probe_output: Mapping[str, Any] | None = None) -> Accelerator:
    """The backend whose accelerators a node has: from a probe's inventory when given, else asking this
    node now; the CPU backend where none claims it."""
    for name in REGISTRY:
        b = backend(name)
        if probe_output is not None and b.claims(probe_output):
            return b
        if probe_output is None and b.detect().found:
            return b
    return backend("cpu")


def inventory() -> dict:
    """This node's accelerators now: the first vendor backend's inventory that lists GPUs, else the last one's
    whose tools are installed (its error says why none); the CPU backend's where no vendor backend is registered."""
    seen = []
    for b in vendors():
        inv = b.inventory()
        if inv["gpus"]:
            return inv
        seen.append(inv)
    # Of none listing GPUs, a backend whose tools are not even installed ("missing") says least.
    return next((i for i in seen if not i.get("missing")), seen[-1]) if seen else backend("cpu").inventory()


def local_detection() -> Detection:
    """This node asked now: the first vendor backend's Detection that found accelerators, else the first that
    failed, else the first one's (how it found none); the CPU backend's where no vendor is registered."""
    seen = [b.detect() for b in vendors()]
    return next((d for d in seen if d.found), None) or next((d for d in seen if d.failed), None) or \
        (seen[0] if seen else backend("cpu").detect())
