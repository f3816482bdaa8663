"""The AMD Instinct backend: amd-smi (rocm-smi where amd-smi is absent) and ROCR_VISIBLE_DEVICES, read here only.

    from bench.cluster.accel import backend
    amd = backend("amd")
    amd.visible_devices_env          # "ROCR_VISIBLE_DEVICES" (bench/data/accelerators.json)
    amd.detect()                     # Detection(tool="amd-smi list", found, count, how, failed)
    amd.inventory()                  # amd-smi static, else rocm-smi --json: the probe's GPU dict
    amd.health_saved(report, folder, present, read_text)   # amd-smi-static.txt, -metric.txt, -topology.txt,
                                                           # -xgmi.txt, rocm-smi.json
    amd.peak("AMD Instinct MI300X OAM").bf16_tflops   # 1307.4 (bench/data/amd_gpu_specs.json)

The readers: text (amd-smi's indented text), readings (one GPU's inventory
and counters), rocm_smi (its JSON), links (topology and xgmi tables), health
(the findings), specs (peaks). ROCm's torch runs the same `nccl` backend
(RCCL) and the `cuda` device type, so the ranks need nothing of their own
beyond the visible-devices variable (a launch names this backend: bench.launch.node
--accel amd). The burn's sampler is amdsmi's (sampler.py; bench.worker.burn picks
it by the plan's "accel"): where amdsmi is absent it says so and samples nothing.
Not built: reading the tools' `--json` output (the recorded outputs are text,
but rocm-smi's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Callable, Mapping

from bench.cluster.accel.amd import health, links, rocm_smi
from bench.cluster.accel.amd.readings import from_amd_smi
from bench.cluster.accel.amd.specs import lookup
from bench.cluster.accel.base import Accelerator, Detection, Links
from bench.core.gpus import GpuSpec

TIMEOUT_S = 30.0
SOURCES = ("amd-smi", "rocm-smi")


def _run(argv: list[str], timeout: float = TIMEOUT_S) -> tuple[str | None, str | None]:
    """(stdout, None), or (None, why not): absent, timed out, failed."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} not on PATH"
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)}: no answer in {timeout:g} s"
    except OSError as e:
        return None, f"{' '.join(argv)}: {e.strerror or e}"
    if p.returncode != 0:
        return None, f"{' '.join(argv)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[:200]}"
    return p.stdout, None


class Amd(Accelerator):
    name = "amd"

    def detect(self) -> Detection:
        tool = "amd-smi" if shutil.which("amd-smi") else "rocm-smi" if shutil.which("rocm-smi") else None
        if tool is None:
            return Detection(tool="amd-smi list", found=False, how="amd-smi: not installed", missing=True)
        if tool == "amd-smi":
            out, why = _run(["amd-smi", "list"])
            n = len(from_amd_smi(out)) if out else 0
            return Detection(tool="amd-smi list", found=n > 0, count=n, how=why or f"amd-smi list: {n} GPU(s)",
                             failed=out is None)  # fmt: skip
        out, why = _run(["rocm-smi", "--showid", "--json"])
        try:
            n = len(rocm_smi.parse(out)[0]) if out else 0
        except ValueError:
            n, why = 0, "rocm-smi --showid --json: not JSON"
        return Detection(tool="rocm-smi --showid --json", found=n > 0, count=n, how=why or f"rocm-smi: {n} GPU(s)",
                         failed=n == 0)  # fmt: skip

    def claims(self, probe_output: Mapping[str, Any]) -> bool:
        gpus = probe_output.get("gpus") or []
        return bool(gpus) and (probe_output.get("source") in SOURCES or any(
            g.get("vendor") == "amd" or "INSTINCT" in str(g.get("name") or "").upper() for g in gpus))

    def inventory(self) -> dict:
        if not (shutil.which("amd-smi") or shutil.which("rocm-smi")):
            return {"gpus": [], "source": None, "cuda_version": None, "driver_version": None,
                    "error": "neither amd-smi nor rocm-smi is installed", "missing": True}
        out, why = _run(["amd-smi", "static"])
        gpus, source, driver = (from_amd_smi(out), "amd-smi", None) if out else ([], None, None)
        if not gpus:
            text, why2 = _run(["rocm-smi", "-a", "--json"])
            if text:
                gpus, system = rocm_smi.parse(text)
                source, driver = "rocm-smi", system["driver_version"]
            why = why or why2
        return {"gpus": [g.inventory() for g in gpus], "source": source, "cuda_version": None,
                "driver_version": driver or next((g.driver_version for g in gpus if g.driver_version), None),
                "error": None if gpus else why}  # fmt: skip

    def links(self, timeout: float = TIMEOUT_S) -> Links:
        out, why = _run(["amd-smi", "topology"], timeout)
        pairs = links.link_types(out) if out else {}
        return Links(matrix={"links": pairs} if pairs else {}, errors={"topology": why} if why else {})

    def health_live(self, report, root: str = "/sys") -> None:
        if shutil.which("amd-smi") is None:   # no AMD tools here: not this node's vendor, nothing to say
            return
        folder, present = {}, set()
        for name, argv in (("amd-smi-static.txt", ["amd-smi", "static"]), ("amd-smi-metric.txt", ["amd-smi", "metric"]),
                           ("amd-smi-topology.txt", ["amd-smi", "topology"])):  # fmt: skip
            out, why = _run(argv)
            if out is None:
                report.not_read(" ".join(argv), why, True)
            else:
                folder[name] = out
                present.add(name)
        if present:
            health.read_texts(report, folder)

    def health_saved(self, report, folder: str, present: set[str], read_text: Callable[[str], str]) -> None:
        health.read_saved(report, folder, present, read_text)

    @property
    def saved_files(self) -> tuple[str, ...]:
        return health.SAVED

    @property
    def saved_gpu_files(self) -> tuple[str, ...]:
        return health.GPU_FILES

    def sampler(self, every: float):
        from bench.cluster.accel.amd.sampler import Sampler

        return Sampler(every)

    def peak(self, name: str | None, memory_mib: int | None = None) -> GpuSpec | None:
        return lookup(name)


def visible(environ: Mapping[str, str] | None = None) -> str | None:
    """The GPUs a process here may use: ROCR_VISIBLE_DEVICES, else HIP_VISIBLE_DEVICES (HIP reads both)."""
    env = os.environ if environ is None else environ
    return env.get("ROCR_VISIBLE_DEVICES", env.get("HIP_VISIBLE_DEVICES"))
