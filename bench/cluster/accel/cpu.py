"""The CPU backend: a node without accelerators, whose ranks run on its cores over gloo.

    from bench.cluster.accel import backend
    cpu = backend("cpu")
    cpu.detect()             # Detection(tool="none", found=True, count=0, how="no accelerator: CPU ranks")
    cpu.inventory()          # {"gpus": [], ..., "error": None, "source": "cpu"}

Every node has it: it is what detect() falls back to where no vendor's
backend claims the node. It reads no tool and no health source (the node's
kernel log, InfiniBand and disk are read for every node by bench.cluster.health)
and has no sampler: a burn on CPU ranks times throughput alone.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from bench.cluster.accel.base import Accelerator, Detection, Links


class Cpu(Accelerator):
    name = "cpu"

    def detect(self) -> Detection:
        return Detection(tool="none", found=True, count=0, how="no accelerator: CPU ranks")

    def claims(self, probe_output: Mapping[str, Any]) -> bool:
        return not probe_output.get("gpus")

    def inventory(self) -> dict:
        return {"gpus": [], "driver_version": None, "cuda_version": None, "error": None, "source": "cpu"}

    def links(self, timeout: float) -> Links:
        return Links()

    def health_live(self, report, root: str = "/sys") -> None:
        report.not_read("gpu", "no GPU on this node (CPU backend)", False)

    def health_saved(self, report, folder: str, present: set[str], read_text: Callable[[str], str]) -> None:
        return None

    @property
    def saved_files(self) -> tuple[str, ...]:
        return ()

    def sampler(self, every: float) -> None:
        return None
