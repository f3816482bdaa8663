"""AMD Instinct peak figures, by the model the tools name: bench.core.gpus's AMD table (bench/data/amd_gpu_specs.json).

    from bench.cluster.accel.amd.specs import lookup
    lookup("AMD Instinct MI300X OAM").bf16_tflops     # 1307.4
    lookup("Aldebaran/MI200 [Instinct MI250X/MI250]").memory_gb   # 64: one GCD

A GpuSpec as bench.core.gpus gives NVIDIA's, with the gfx target in `cc`'s
place (AMD has no compute capability). The model token (MI250X, MI300X,
MI325X, MI355X) is found in the name; a model the table lacks (MI100, MI300A,
MI308X, MI350X) is None. The table is read in bench.core.gpus, so the ranks'
MFU (bench.analysis.figures) and the hetero verdict find the same figures.
"""

from __future__ import annotations

from bench.core.gpus import GpuSpec, lookup_amd


def lookup(name: str | None) -> GpuSpec | None:
    return lookup_amd(name)
