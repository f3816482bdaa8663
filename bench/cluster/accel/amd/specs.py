"""AMD Instinct peak figures from bench/data/amd_gpu_specs.json, by the model the tools name.

    from bench.cluster.accel.amd.specs import lookup
    lookup("AMD Instinct MI300X OAM").bf16_tflops     # 1307.4
    lookup("Aldebaran/MI200 [Instinct MI250X/MI250]").memory_gb   # 64: one GCD

A GpuSpec as bench.core.gpus gives NVIDIA's, with the gfx target in `cc`'s
place (AMD has no compute capability; bench.core.gpus.supports does not read
it for AMD). The model token (MI250X, MI300X, MI325X, MI355X) is found in
the name; a model the table lacks (MI100, MI300A, MI308X, MI350X) is None.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

from bench.core.gpus import GpuSpec

_MODEL = re.compile(r"\bMI\d{3}[A-Z]?\b", re.I)


@functools.cache
def table() -> dict[str, GpuSpec]:
    raw = json.loads(resources.files("bench").joinpath("data/amd_gpu_specs.json").read_text("utf-8"))
    out = {}
    for e in raw["gpus"]:
        spec = GpuSpec(name=e["name"], arch=e["arch"], cc=e["gfx"], memory_gb=float(e["memory_gb"]),
                       fp32_tflops=e["fp32_tflops"], fp16_tflops=e["fp16_tflops"], bf16_tflops=e["bf16_tflops"],
                       source=e["source"], aliases=tuple(e["aliases"]))  # fmt: skip
        out[_MODEL.search(e["name"]).group(0).upper()] = spec
    return out


def lookup(name: str | None) -> GpuSpec | None:
    """The first model token of the name that the table has ("Aldebaran/MI200 [Instinct MI250X/MI250]": MI250X)."""
    return next((table()[m.upper()] for m in _MODEL.findall(name or "") if m.upper() in table()), None)
