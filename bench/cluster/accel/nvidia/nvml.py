"""A node's GPU health counters read live through NVML (nvidia-ml-py's pynvml), in gpu_state's GpuHealth.

    from bench.cluster.accel.nvidia.nvml import read
    r = read()                  # NvmlRead(gpus=[GpuHealth, ...], reason=None, no_driver=False, lost=[])
    r.gpus[0].remap_pending, r.gpus[0].reasons, r.gpus[0].nvlinks

Per GPU: remapped rows, retired pages pending, total uncorrectable ECC errors
(volatile and aggregate), the current clocks event (throttle) reasons bitmask,
the performance state, current and max PCIe generation and width, the driver's
recovery action where the driver has that field, and each NVLink's state and
error counters (replay, recovery, CRC flit, CRC data). A call that raises
NotSupported (or FunctionNotFound: an older driver) makes that reading "not
supported" on that GPU, not an error; any other NVML error is that reading's
"unreadable" reason. A GPU whose handle cannot be had (GPU is lost, Unknown
Error) is listed in `lost`. No NVML library or no driver is `no_driver`: the
caller falls back to `nvidia-smi -q` (smi_query) and, if that is missing too,
to "no GPU on this node". NVML calls run in-process and take no timeout; a
driver that hangs NVML hangs nvidia-smi as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.cluster.accel.nvidia import fabric_nvml
from bench.cluster.accel.nvidia.gpu_state import GpuHealth

# NVML's clocks event reasons bits (nvmlClocksEventReason*, the same values as nvmlClocksThrottleReason*).
REASON_BITS = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
               0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock"}  # fmt: skip
NVLINK_COUNTERS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
                   ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
                   ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
                   ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3))  # (name, pynvml constant, its value in nvml.h)
# NVML return codes by name and their values in nvml.h, for a pynvml that lacks the name.
_CODES = {"NOT_SUPPORTED": 3, "FUNCTION_NOT_FOUND": 13, "INVALID_ARGUMENT": 2, "LIBRARY_NOT_FOUND": 12,
          "DRIVER_NOT_LOADED": 9, "GPU_IS_LOST": 15, "UNKNOWN": 999}  # fmt: skip
_RECOVERY = {1: "reset_required", 2: "reboot_required", 4: "drain_and_reset"}  # NVML_GPU_RECOVERY_ACTION_*


@dataclass(slots=True)
class NvmlRead:
    gpus: list[GpuHealth] | None = None
    reason: str | None = None           # why NVML gave nothing
    no_driver: bool = False             # no NVML library or no driver loaded: fall back, not an error
    lost: list[tuple[int, str]] = field(default_factory=list)   # (index, NVML's error) of GPUs it cannot open
    driver: str | None = None


def _code(nv, name: str) -> int:
    return getattr(nv, f"NVML_ERROR_{name}", _CODES[name])


def _is(nv, e: Exception, *names: str) -> bool:
    return getattr(e, "value", None) in {_code(nv, n) for n in names}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _get(nv, g: GpuHealth, reading: str, fn_name: str, *args):
    """One NVML call for one reading: its value, or None with the reason kept on the GPU."""
    fn = getattr(nv, fn_name, None)
    if fn is None:  # a pynvml too old to have the call
        g.unsupported.append(reading)
        return None
    try:
        return fn(*args)
    except nv.NVMLError as e:
        if _is(nv, e, "NOT_SUPPORTED", "FUNCTION_NOT_FOUND"):
            g.unsupported.append(reading)
        else:
            g.unreadable[reading] = str(e)
        return None


def _reasons(nv, g: GpuHealth, h) -> None:
    name = "nvmlDeviceGetCurrentClocksEventReasons" if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons") \
        else "nvmlDeviceGetCurrentClocksThrottleReasons"  # fmt: skip
    mask = _get(nv, g, "clocks event reasons", name, h)
    if mask is not None:
        g.reasons = frozenset(r for bit, r in REASON_BITS.items() if int(mask) & bit)


def _nvlinks(nv, g: GpuHealth, h) -> None:
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = bool(nv.nvmlDeviceGetNvLinkState(h, link))
        except nv.NVMLError as e:
            if link == 0 and not _is(nv, e, "NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "INVALID_ARGUMENT"):
                g.unreadable["nvlink"] = str(e)
            break  # NotSupported on link 0: no NVLink; past the last link: InvalidArgument or NotSupported
        errors = {}
        for name, const, default in NVLINK_COUNTERS if active else ():
            value = _get(nv, g, f"nvlink {link} {name}", "nvmlDeviceGetNvLinkErrorCounter", h, link,
                         getattr(nv, const, default))  # fmt: skip
            if value is not None:
                errors[name] = int(value)
        g.nvlinks.append({"link": link, "active": active, "errors": errors})


def _recovery(nv, g: GpuHealth, h) -> None:
    fid = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    values = _get(nv, g, "recovery action", "nvmlDeviceGetFieldValues", h, [fid]) if fid is not None else None
    if not values or getattr(values[0], "nvmlReturn", 1) != 0:
        return
    action = int(values[0].value.uiVal)
    for flag in ("reset_required", "reboot_required", "drain_and_reset"):
        setattr(g, flag, _RECOVERY.get(action) == flag)


def _gpu(nv, index: int, h) -> GpuHealth:
    g = GpuHealth(index, None)
    pci, name = _get(nv, g, "pci", "nvmlDeviceGetPciInfo", h), _get(nv, g, "name", "nvmlDeviceGetName", h)
    g.bus_id, g.name = (_text(pci.busId) if pci is not None else None), (_text(name) if name is not None else None)
    rows = _get(nv, g, "remapped rows", "nvmlDeviceGetRemappedRows", h)
    if rows is not None:
        g.remap_correctable, g.remap_uncorrectable = int(rows[0]), int(rows[1])
        g.remap_pending, g.remap_failed = bool(rows[2]), bool(rows[3])
    pending = _get(nv, g, "retired pages pending", "nvmlDeviceGetRetiredPagesPendingStatus", h)
    g.retired_pending = None if pending is None else int(pending) == getattr(nv, "NVML_FEATURE_ENABLED", 1)
    unc = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    for attr, scope, const, default in (("ecc_volatile_uncorrectable", "volatile", "NVML_VOLATILE_ECC", 0),
                                        ("ecc_aggregate_uncorrectable", "aggregate", "NVML_AGGREGATE_ECC", 1)):
        n = _get(nv, g, f"ECC {scope}", "nvmlDeviceGetTotalEccErrors", h, unc, getattr(nv, const, default))
        setattr(g, attr, None if n is None else int(n))
    g.ecc_detail = ", ".join(f"{s} {n}" for s, n in (("volatile", g.ecc_volatile_uncorrectable),
                                                      ("aggregate", g.ecc_aggregate_uncorrectable)) if n is not None)
    _reasons(nv, g, h)
    pstate = _get(nv, g, "performance state", "nvmlDeviceGetPerformanceState", h)
    g.pstate = None if pstate is None or int(pstate) == 32 else f"P{int(pstate)}"   # 32: NVML_PSTATE_UNKNOWN
    g.pcie_gen = _get(nv, g, "PCIe generation", "nvmlDeviceGetCurrPcieLinkGeneration", h)
    g.pcie_gen_max = _get(nv, g, "PCIe max generation", "nvmlDeviceGetMaxPcieLinkGeneration", h)
    g.pcie_width = _get(nv, g, "PCIe width", "nvmlDeviceGetCurrPcieLinkWidth", h)
    g.pcie_width_max = _get(nv, g, "PCIe max width", "nvmlDeviceGetMaxPcieLinkWidth", h)
    _recovery(nv, g, h)
    _nvlinks(nv, g, h)
    g.fabric = fabric_nvml.read(nv, h, index, g.bus_id)
    return g


def read(nv=None) -> NvmlRead:
    """Every GPU's health counters through NVML; `nv` is the pynvml module (a stand-in in unit tests)."""
    if nv is None:
        try:
            import pynvml as nv
        except ImportError:
            return NvmlRead(reason="nvidia-ml-py (pynvml) not installed", no_driver=True)
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return NvmlRead(reason=f"NVML: {e}", no_driver=_is(nv, e, "LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED"))
    out = NvmlRead(gpus=[])
    try:
        out.driver = _text(nv.nvmlSystemGetDriverVersion())
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as e:
                out.lost.append((i, str(e)))
                continue
            out.gpus.append(_gpu(nv, i, h))
    except nv.NVMLError as e:
        out.reason = f"NVML: {e}"
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
    return out
