"""A GPU's NVLink fabric info through NVML (nvmlDeviceGetGpuFabricInfoV), as fabric_state reads it from -q.

    from bench.cluster.accel.nvidia.fabric_nvml import read
    read(pynvml, handle, 0, "00000000:19:00.0")     # GpuFabric(state="Completed", status="Success", ...) or None

The versioned struct (c_nvmlGpuFabricInfoV_t, version nvmlGpuFabricInfo_v2)
holds clusterUuid, status (an nvmlReturn_t: 0 is Success), cliqueId, state
and healthMask, whose fields are NVML's SHIFT/WIDTH pairs: degraded
bandwidth, route recovery, route unhealthy, access timeout recovery (1 true,
2 false, 0 not supported) and incorrect configuration (1 none, 2.. what is
wrong). The figures are nvml.h's, read from `nv` where it defines them. A GPU
or driver without the call (NotSupported, an older pynvml) gives None: not read,
not judged. The health summary is not in this struct version.
"""

from __future__ import annotations

import ctypes

from bench.cluster.accel.nvidia.fabric_state import ZERO_UUID, GpuFabric

STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}   # 0: not supported
_BOOL = {1: "True", 2: "False"}
# (key as fabric_state names it, NVML's name, default shift, default width, values)
MASK = (("bandwidth", "DEGRADED_BW", 0, 3, {1: "Degraded", 2: "Full"}),
        ("route_recovery_in_progress", "ROUTE_RECOVERY", 2, 3, _BOOL),
        ("route_unhealthy", "ROUTE_UNHEALTHY", 4, 3, _BOOL),
        ("access_timeout_recovery", "ACCESS_TIMEOUT_RECOVERY", 6, 3, _BOOL),
        ("incorrect_configuration", "INCORRECT_CONFIGURATION", 8, 15,
         {1: "None", 2: "Incorrect SysGUID", 3: "Incorrect Chassis SN", 4: "No Partition", 5: "Insufficient NVLinks",
          6: "Incompatible GPU Firmware", 7: "Invalid Location", 8: "GPU State Invalid"}))  # fmt: skip


def _uuid(raw) -> str | None:
    b = bytes(raw)
    text = "-".join(b[i:j].hex() for i, j in ((0, 4), (4, 6), (6, 8), (8, 10), (10, 16)))
    return None if text == ZERO_UUID else text


def health(nv, mask: int) -> dict[str, str]:
    """The health mask's fields that are supported, in fabric_state's words."""
    out = {}
    for key, name, shift, width, values in MASK:
        s = getattr(nv, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}", shift)
        w = getattr(nv, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{name}", width)
        v = (mask >> s) & w
        if v in values:
            out[key] = values[v]
    return out


def read(nv, h, index: int, bus: str | None) -> GpuFabric | None:
    info_t, fn = getattr(nv, "c_nvmlGpuFabricInfoV_t", None), getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
    if info_t is None or fn is None:
        return None
    info = info_t()
    info.version = getattr(nv, "nvmlGpuFabricInfo_v2", 33554468)
    try:
        fn(h, ctypes.byref(info))
    except Exception:  # NVMLError: NotSupported (no fabric, an older driver) or the GPU's own failure
        return None
    state = STATES.get(int(info.state))
    if state is None:
        return None
    status = "Success" if int(info.status) == 0 else str(getattr(nv, "nvmlErrorString", lambda s: s)(int(info.status)))
    return GpuFabric(index=index, bus_id=bus, state=state, status=status, clique_id=int(info.cliqueId),
                     cluster_uuid=_uuid(info.clusterUuid), health=health(nv, int(info.healthMask)))  # fmt: skip
