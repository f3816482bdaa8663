"""The NVIDIA backend: nvidia-smi, NVML (pynvml), DCGM and CUDA_VISIBLE_DEVICES are read here and only here.

    from bench.cluster.accel import backend
    nv = backend("nvidia")
    nv.detect()                      # Detection(tool="nvidia-smi -L", found, count, how, failed)
    nv.inventory()                   # NVML, else nvidia-smi --query-gpu (the probe's GPU dict)
    nv.links(10.0)                   # nvidia-smi topo -m and nvidia-smi nvlink -s
    nv.health_live(report)           # NVML, else nvidia-smi -q, and nvidia-smi nvlink -s
    nv.health_saved(report, folder, present, read_text)   # nvidia-smi-q.txt, nvidia-smi.txt, nvidia-smi-nvlink.txt
    nv.sampler(1.0)                  # the burn's NVML sampler (sampler.py: import-light, a rank runs it)

The readers are this package's modules (smi, topo, nvml, smi_query,
smi_status, gpu_state, nvlink, dcgm, nvbandwidth, health_live,
health_saved, sampler, nvml_gpus); this class is the interface's face over
them and says nothing they do not. Imported on first use (bench.cluster.accel.backend).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from bench.cluster.accel.base import Accelerator, Detection, Links


class Nvidia(Accelerator):
    """Claims any node with GPUs that no backend asked before it claims (bench has read NVIDIA GPUs only)."""

    name = "nvidia"

    def detect(self) -> Detection:
        from bench.cluster.accel.nvidia.smi import gpu_count

        n, how, failed = gpu_count()
        return Detection(tool="nvidia-smi -L", found=n > 0, count=n, how=how, failed=failed,
                         missing=how == "no nvidia-smi")

    def claims(self, probe_output: Mapping[str, Any]) -> bool:
        gpus = probe_output.get("gpus") or []   # not those another backend's inventory named as its own (AMD's)
        return bool(gpus) and not all(g.get("vendor") not in (None, "nvidia") for g in gpus)

    def inventory(self) -> dict:
        from bench.cluster.accel.nvidia.nvml_gpus import local_gpus

        return local_gpus()

    def links(self, timeout: float) -> Links:
        from bench.cluster.accel.nvidia.topo import read_links

        topo, nvlink, errors = read_links(timeout)
        return Links(matrix=topo, per_device=nvlink, errors=errors)

    def intra(self, gpus: list[dict], topo: dict | None, nvlink: dict | None, pcie: dict) -> dict:
        from bench.cluster.accel.nvidia.intra import intra

        return intra(gpus, topo, nvlink, pcie)

    def health_live(self, report, root: str = "/sys") -> None:
        from bench.cluster.accel.nvidia.health_live import read

        read(report, root)

    def health_saved(self, report, folder: str, present: set[str], read_text: Callable[[str], str]) -> None:
        from bench.cluster.accel.nvidia.health_saved import read

        read(report, folder, present, read_text)

    @property
    def saved_files(self) -> tuple[str, ...]:
        from bench.cluster.accel.nvidia.health_saved import FILES

        return FILES

    @property
    def saved_gpu_files(self) -> tuple[str, ...]:
        from bench.cluster.accel.nvidia.health_saved import GPU_FILES

        return GPU_FILES

    def sampler(self, every: float):
        from bench.cluster.accel.nvidia.sampler import Sampler

        return Sampler(every)
