"""The NVIDIA backend: nvidia-smi, NVML (pynvml), DCGM and CUDA_VISIBLE_DEVICES are read here and only here.

    from bench.cluster.accel import backend
    nv = backend("nvidia")
    nv.detect()                      # Detection(tool="nvidia-smi -L", found, count, how, failed)
    nv.inventory()                   # NVML, else nvidia-smi --query-gpu (the probe's GPU dict)
    nv.health_live(report)           # NVML, else nvidia-smi -q, and nvidia-smi nvlink -s
    nv.health_saved(report, folder, present)   # nvidia-smi-q.txt, nvidia-smi.txt, nvidia-smi-nvlink.txt

The readers are this package's modules; this class is the interface's face
over them, and says nothing they do not.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from bench.cluster.accel.base import Accelerator, Detection, Links

# The GPU sources a probe's inventory names for NVIDIA GPUs (bench.cluster.probe's "source").
SOURCES = ("nvml", "nvidia-smi")
SAVED = ("nvidia-smi-q.txt", "nvidia-smi.txt", "nvidia-smi-nvlink.txt")


class Nvidia(Accelerator):
    name = "nvidia"

    def detect(self) -> Detection:
        from bench.cluster.smi import gpu_count

        n, how, failed = gpu_count()
        return Detection(tool="nvidia-smi -L", found=n > 0, count=n, how=how, failed=failed)

    def claims(self, probe_output: Mapping[str, Any]) -> bool:
        gpus = probe_output.get("gpus") or []
        return bool(gpus) and (probe_output.get("source") in SOURCES or
                               any(g.get("cc_source") in SOURCES or
                                   str(g.get("name") or "").upper().startswith(("NVIDIA", "TESLA", "QUADRO"))
                                   for g in gpus))  # fmt: skip

    def inventory(self) -> dict:
        from bench.cluster.probe import local_gpus

        return local_gpus()

    def links(self) -> Links:
        from bench.cluster.interconnect import _run, parse_nvlink_status, parse_topo_matrix

        errors: dict[str, str] = {}
        out, why = _run(["nvidia-smi", "topo", "-m"])
        topo = parse_topo_matrix(out) if out is not None else {}
        if why or (topo and topo["error"]):
            errors["topo"] = why or topo["error"]
        out, why = _run(["nvidia-smi", "nvlink", "-s"])
        if why:
            errors["nvlink"] = why
        return Links(matrix=topo, per_device=parse_nvlink_status(out) if out is not None else {}, errors=errors)

    def health_live(self, report, root: str = "/sys") -> None:
        from bench.cluster.health.live import _gpus

        _gpus(report, root)

    def health_saved(self, report, folder: str, present: set[str]) -> None:
        from bench.cluster.health import saved

        for name, read in (("nvidia-smi-q.txt", saved._smi_q), ("nvidia-smi.txt", saved._smi),
                           ("nvidia-smi-nvlink.txt", saved._nvlink)):  # fmt: skip
            if name in present:
                read(report, os.path.join(folder, name))

    @property
    def saved_files(self) -> tuple[str, ...]:
        return SAVED

    def sampler(self, every: float):
        from bench.worker.nvml_sampler import Sampler

        return Sampler(every)
