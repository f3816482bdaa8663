"""This node's NVIDIA GPUs for the inventory: NVML (nvidia-ml-py), else `nvidia-smi --query-gpu`.

    from bench.cluster.accel.nvidia.nvml_gpus import local_gpus
    local_gpus()     # {"gpus": [gpu_record...], "driver_version", "cuda_version", "error"[, "source"]}

Moved here from bench.cluster.probe, unchanged; the probe asks the backend
(bench.cluster.accel: Accelerator.inventory).
"""

from __future__ import annotations

from bench.cluster.accel.nvidia.smi import gpu_record, query_gpus, result


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpus_from_nvml() -> dict:
    """GPUs through NVML; error says why not (no library, no driver, ...)."""
    try:
        import pynvml
    except ImportError:
        return result(error="NVML: nvidia-ml-py (pynvml) not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return result(error=f"NVML: {e}")
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_int = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append(gpu_record(i, _text(pynvml.nvmlDeviceGetName(h)),
                             pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20, f"{major}.{minor}",
                             _text(pynvml.nvmlDeviceGetPciInfo(h).busId), "nvml", _mig_mode(pynvml, h),
                             _text(pynvml.nvmlDeviceGetUUID(h))))  # fmt: skip
        return {**result(gpus, driver, f"{cuda_int // 1000}.{cuda_int % 1000 // 10}"), "source": "nvml"}
    except pynvml.NVMLError as e:
        return result(error=f"NVML: {e}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _mig_mode(pynvml, handle) -> str | None:
    """'Enabled' or 'Disabled' as NVML reports the current MIG mode; None where the GPU has none (pre-Ampere)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:
        return None
    return "Enabled" if current == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1) else "Disabled"


def local_gpus() -> dict:
    """NVML, else nvidia-smi; both reasons kept when neither gives GPUs."""
    nvml = gpus_from_nvml()
    if nvml["gpus"]:
        return nvml
    smi = query_gpus()
    if smi["gpus"]:
        return smi
    return {**smi, "error": f"{nvml['error'] or 'NVML lists no GPU'}; {smi['error'] or 'nvidia-smi lists no GPU'}"}
