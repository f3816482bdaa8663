"""The NVML reader's mapping of pynvml's answers to GpuHealth and findings.

No GPU, driver or NVML library exists on the machines these tests run on, so
pynvml is replaced by a small stand-in that answers as pynvml's own functions
do (their names, return shapes and NVMLError with a `.value`, as in
nvidia-ml-py's pynvml.py) and raises NVML's NotSupported / GPU-is-lost codes.
A live GPU node exercises the real module through collect_live.
"""

from __future__ import annotations

from types import SimpleNamespace

from bench.cluster.accel.nvidia.nvml import read
from bench.cluster.accel.nvidia.gpu_state import gpu_findings
from bench.cluster.accel.nvidia.nvlink import link_findings
from tests.health_fixtures import codes


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


NOT_SUPPORTED, INVALID_ARGUMENT, GPU_IS_LOST, LIBRARY_NOT_FOUND = 3, 2, 15, 12


def fake_nvml(gpus: dict, lost: set = frozenset(), init_error: int | None = None):
    """A pynvml stand-in: gpus maps index -> {function name: value, or an int error code to raise}."""

    def call(name):
        def fn(h, *args):
            v = gpus[h][name]
            v = v(*args) if callable(v) else v
            if isinstance(v, NVMLError):
                raise v
            return v
        return fn

    def handle(i):
        if i in lost:
            raise NVMLError(GPU_IS_LOST)
        return i

    def init():
        if init_error is not None:
            raise NVMLError(init_error)

    names = ("nvmlDeviceGetPciInfo", "nvmlDeviceGetName", "nvmlDeviceGetRemappedRows",
             "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetTotalEccErrors",
             "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetPerformanceState",
             "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
             "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetNvLinkState",
             "nvmlDeviceGetNvLinkErrorCounter")
    return SimpleNamespace(NVMLError=NVMLError, NVML_ERROR_NOT_SUPPORTED=NOT_SUPPORTED,
                           NVML_ERROR_INVALID_ARGUMENT=INVALID_ARGUMENT, NVML_ERROR_GPU_IS_LOST=GPU_IS_LOST,
                           NVML_ERROR_LIBRARY_NOT_FOUND=LIBRARY_NOT_FOUND, NVML_NVLINK_MAX_LINKS=18,
                           NVML_FEATURE_ENABLED=1, nvmlInit=init, nvmlShutdown=lambda: None,
                           nvmlSystemGetDriverVersion=lambda: b"550.54.15",
                           nvmlDeviceGetCount=lambda: len(gpus) + len(lost), nvmlDeviceGetHandleByIndex=handle,
                           **{n: call(n) for n in names})


def links(states: list[bool], errors: dict | None = None):
    """nvmlDeviceGetNvLinkState and ...ErrorCounter for a GPU with these links (InvalidArgument past the last)."""
    def state(link):
        return NVMLError(INVALID_ARGUMENT) if link >= len(states) else int(states[link])

    def counter(link, which):
        return (errors or {}).get((link, which), 0)
    return {"nvmlDeviceGetNvLinkState": state, "nvmlDeviceGetNvLinkErrorCounter": counter}


def gpu(bus: str, **over):
    base = {"nvmlDeviceGetPciInfo": SimpleNamespace(busId=bus.encode()), "nvmlDeviceGetName": b"NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetRemappedRows": (0, 0, 0, 0), "nvmlDeviceGetRetiredPagesPendingStatus": 0,
            "nvmlDeviceGetTotalEccErrors": lambda kind, scope: 0, "nvmlDeviceGetCurrentClocksEventReasons": 0x1,
            "nvmlDeviceGetPerformanceState": 0, "nvmlDeviceGetCurrPcieLinkGeneration": 5,
            "nvmlDeviceGetMaxPcieLinkGeneration": 5, "nvmlDeviceGetCurrPcieLinkWidth": 16,
            "nvmlDeviceGetMaxPcieLinkWidth": 16, **links([True] * 18)}
    return {**base, **over}


def findings_of(r) -> list[dict]:
    return [f for g in r.gpus for f in gpu_findings(g, "nvml") + link_findings(g.index, g.bus_id, g.nvlinks, "nvml")]


def test_a_healthy_gpu_read_through_nvml_gives_no_finding():
    r = read(fake_nvml({0: gpu("00000000:19:00.0")}))
    assert r.reason is None and r.driver == "550.54.15"
    g = r.gpus[0]
    assert (g.bus_id, g.name, g.reasons, g.pstate, len(g.nvlinks)) == ("00000000:19:00.0", "NVIDIA H100 80GB HBM3",
                                                                        frozenset({"idle"}), "P0", 18)
    assert findings_of(r) == []


def test_nvml_readings_map_to_the_same_findings_as_nvidia_smi():
    sick = gpu("00000000:3B:00.0", nvmlDeviceGetRemappedRows=(0, 2, 1, 0),
               nvmlDeviceGetTotalEccErrors=lambda kind, scope: 2 if scope == 0 else 9,
               nvmlDeviceGetCurrentClocksEventReasons=0x8 | 0x40, nvmlDeviceGetCurrPcieLinkWidth=8,
               **links([True, True, False, True], {(0, 0): 7}))
    r = read(fake_nvml({0: gpu("00000000:19:00.0"), 1: sick}))
    assert codes(findings_of(r)) == [
        ("row-remap-pending", "fail", "reset-gpu", 1), ("ecc-uncorrectable-volatile", "fail", "reset-gpu", 1),
        ("ecc-uncorrectable-aggregate", "warn", "watch", 1), ("throttle-hw-thermal", "warn", "reseat", 1),
        ("pcie-width-degraded", "warn", "reseat", 1), ("nvlink-down", "fail", "reset-gpu", 1),
        ("nvlink-errors", "warn", "watch", 1)]
    assert "link 0 replay 7" in findings_of(r)[-1]["what"] and "2 inactive" in findings_of(r)[-2]["what"]


def test_a_reading_the_gpu_does_not_support_is_not_supported_not_an_error():
    consumer = gpu("00000000:01:00.0", nvmlDeviceGetRemappedRows=NVMLError(NOT_SUPPORTED),
                   nvmlDeviceGetTotalEccErrors=lambda kind, scope: NVMLError(NOT_SUPPORTED),
                   nvmlDeviceGetNvLinkState=lambda link: NVMLError(NOT_SUPPORTED))
    g = read(fake_nvml({0: consumer})).gpus[0]
    assert g.unreadable == {} and {"remapped rows", "ECC volatile", "ECC aggregate"} <= set(g.unsupported)
    assert (g.remap_pending, g.ecc_volatile_uncorrectable, g.nvlinks) == (None, None, [])


def test_any_other_nvml_error_is_that_readings_reason():
    g = read(fake_nvml({0: gpu("00000000:01:00.0", nvmlDeviceGetRemappedRows=NVMLError(999))})).gpus[0]
    assert list(g.unreadable) == ["remapped rows"] and g.remap_pending is None


def test_a_gpu_nvml_cannot_open_is_listed_as_lost():
    r = read(fake_nvml({0: gpu("00000000:19:00.0")}, lost={1}))
    assert [g.index for g in r.gpus] == [0] and r.lost == [(1, "NVML error 15")]


def test_no_nvml_library_means_no_driver_here_not_an_error():
    r = read(fake_nvml({}, init_error=LIBRARY_NOT_FOUND))
    assert (r.gpus, r.no_driver) == (None, True) and "NVML" in r.reason
    assert read(fake_nvml({}, init_error=999)).no_driver is False
