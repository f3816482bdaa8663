"""The burn's NVML per GPU (issue 48 item 2): bench.cluster.accel.nvidia.sampler against a stand-in pynvml, and what
bench.validate.burn and bench.analysis.burn make of what it gives.

No GPU, driver or NVML library exists here. The stand-in answers as nvidia-ml-py's pynvml does: its function
names, an NVMLError whose .value is NVML's return code (nvml.h: NotSupported 3, Timeout 10, Unknown 999) and
whose text is pynvml's ("Unknown Error", "Not Supported"). Its eight GPUs are the recorded 8x H100 node of
tests/fixtures/health/nvidia-smi-q_h100x8_gpu2-sw-power-cap-sw-thermal-active.txt (gpud's testdata, driver
535.183.01): each GPU's bus id, SM and memory clock, temperature, power draw and limit, and its clocks event
reasons as that recording shows them (bits as nvml.h defines them: tests/unit/test_burn.py's _BITS). Faults are
put in from the stand-in's side: a handle that raises on one GPU ("Unable to determine the device handle for GPU
0000:09:00.0: Unknown Error" is how nvidia-smi said it in tests/fixtures/health/
nvidia-smi-a-i0_unable-to-determine-device-handle_unknown-error.txt), one call that raises on one GPU, a
reasons call that is NotSupported, a pynvml without the reasons functions, one whose reasons come back in a
form int() refuses (the thread's death).
"""

from __future__ import annotations

import types

from bench.analysis import burn
from bench.cluster.hostfile import HostSelection
from bench.validate import burn as vburn
from bench.validate.config import ValidateConfig
from bench.validate.state import Validation
from bench.cluster.accel.nvidia.sampler import Sampler
from tests.unit.test_burn import CAPPED, readings

NOT_SUPPORTED, UNKNOWN = 3, 999
TEXT = {NOT_SUPPORTED: "Not Supported", UNKNOWN: "Unknown Error", 10: "Timeout"}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(TEXT[value])
        self.value = value


GPUS = readings(CAPPED)   # [{"bus": "00000000:53:00.0", "sample": {...}, ...}] x 8


def fake_nvml(lost=(), failing=None, reasons=None, drop=()):
    """A pynvml of the recorded node. lost: indexes whose handle raises Unknown Error; failing: {index: function
    name} that raises Unknown Error on that GPU; reasons: a function (index -> value or NVMLError) replacing the
    recorded reasons; drop: names pynvml lacks."""
    def raising(i, name):
        return (failing or {}).get(i) == name

    def reading(name, key, scale=1):
        def fn(h, *_):
            if raising(h, name):
                raise NVMLError(UNKNOWN)
            return GPUS[h]["sample"][key] * scale
        return fn

    def handle(i):
        if i in lost:
            raise NVMLError(UNKNOWN)
        return i

    def clock(h, which):
        if raising(h, "nvmlDeviceGetClockInfo"):
            raise NVMLError(UNKNOWN)
        return GPUS[h]["sample"]["sm_mhz" if which == 1 else "mem_mhz"]

    def get_reasons(h):
        v = reasons(h) if reasons else GPUS[h]["sample"]["reasons"]
        if isinstance(v, NVMLError):
            raise v
        return v

    def wait(*_):
        raise NVMLError(10)

    calls = dict(nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: len(GPUS),
                 nvmlDeviceGetHandleByIndex=handle,
                 nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=GPUS[h]["bus"].encode()),
                 nvmlDeviceGetClockInfo=clock, nvmlDeviceGetTemperature=reading("nvmlDeviceGetTemperature", "temp_c"),
                 nvmlDeviceGetPowerUsage=reading("nvmlDeviceGetPowerUsage", "power_w", 1000),
                 nvmlDeviceGetEnforcedPowerLimit=reading("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w", 1000),
                 nvmlDeviceGetCurrentClocksEventReasons=get_reasons, nvmlDeviceGetTotalEccErrors=lambda *a: 0,
                 nvmlEventSetCreate=lambda: "set", nvmlDeviceRegisterEvents=lambda *a: None,
                 nvmlEventSetWait_v2=wait, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2)
    return types.SimpleNamespace(**{k: v for k, v in calls.items() if k not in drop})


def sampled(nvml, n: int = 30, driver_gpus: str = "/nonexistent") -> dict:
    s = Sampler(1.0, nvml=nvml, driver_gpus=driver_gpus)
    assert s.open()
    for k in range(n):
        s.sample(now=100.0 + k)
    return s.stop()


def node_rows(part: dict, n: int = 30, failed: dict | None = None):
    """validate's rows of the recorded node after an n-second burn: every rank trained at 500 img/s; local rank 0
    carried the sampler's part; failed: {slot: entry} of ranks whose burn failed."""
    v = Validation(ValidateConfig(level="quick", burn=f"{n}s"), HostSelection(), {"h100": list(range(8))}, None,
                   "/nonexistent")
    mine = {s: {"status": "ok", "local_rank": s, "bus_id": GPUS[s]["bus"], "interval_s": 1.0, "start": 100.0,
                "steps": n, "intervals": [[100.0 + k, 500.0] for k in range(1, n)], **(part if s == 0 else {})}
            for s in range(8)}
    mine.update(failed or {})
    vburn._node(v, "h100", list(range(8)), mine, float(n), 0.0)
    return {c.node: c for c in v.checks}


def test_a_gpu_whose_handle_nvml_cannot_give_is_that_gpu_s_finding_and_the_other_seven_are_sampled(tmp_path):
    # The driver's own list names it, as nvidia-smi does (one folder per GPU, by bus id).
    for g in GPUS:
        (tmp_path / g["bus"][4:].lower()).mkdir()
    part = sampled(fake_nvml(lost={3}), driver_gpus=str(tmp_path))
    assert part["nvml_error"] is None and len(part["nvml"]) == 7 and GPUS[3]["bus"] not in part["nvml"]
    assert part["nvml_findings"] == {"0000:86:00.0": ["NVML: GPU 0000:86:00.0 Unknown Error"]}
    assert part["nvml_lost"] == ["0000:86:00.0"]
    assert all(cols["sm_mhz"] == [g["sample"]["sm_mhz"]] * 30 for g in GPUS if (cols := part["nvml"].get(g["bus"])))
    # Without the driver's list it is named by NVML's index.
    assert sampled(fake_nvml(lost={3}))["nvml_findings"] == {"index 3": ["NVML: GPU index 3 Unknown Error"]}
    # validate: its rank's row FAILs with the finding (gpu-unreachable); the other seven are judged as sampled.
    rows = node_rows(part, failed={3: {"status": "failed", "measured": True, "bus_id": "0000:86:00.0",
                                       "reason": "CUDA error: unspecified launch failure"}})
    assert rows["h100:3"].status == "FAIL" and "NVML: GPU 0000:86:00.0 Unknown Error" in rows["h100:3"].reason
    assert rows["h100:3"].action == "reboot"
    assert [rows[f"h100:{s}"].status for s in range(8) if s != 3] == ["PASS"] * 7
    assert rows["h100"].status == "FAIL" and "NVML sampled each second, 7 GPU(s)" in rows["h100"].value
    # Named by index only, it cannot be matched to a rank: the node's row carries it.
    rows = node_rows(sampled(fake_nvml(lost={3})))
    assert rows["h100"].status == "FAIL" and "NVML: GPU index 3 Unknown Error" in rows["h100"].value


def test_a_call_that_fails_on_one_gpu_is_recorded_once_with_its_function_and_the_rest_is_read():
    part = sampled(fake_nvml(failing={5: "nvmlDeviceGetPowerUsage"}))
    bus = GPUS[5]["bus"]
    assert part["nvml_findings"] == {bus: [f"NVML: GPU {bus} nvmlDeviceGetPowerUsage: Unknown Error"]}
    cols = part["nvml"][bus]
    assert cols["power_w"] == [None] * 30 and cols["sm_mhz"] == [GPUS[5]["sample"]["sm_mhz"]] * 30
    assert part["nvml"][GPUS[4]["bus"]]["power_w"] == [GPUS[4]["sample"]["power_w"]] * 30
    rows = node_rows(part)
    assert rows["h100:5"].status == "WARN" and "nvmlDeviceGetPowerUsage: Unknown Error" in rows["h100:5"].reason


def test_a_reasons_call_that_is_not_supported_is_unknown_not_zero():
    part = sampled(fake_nvml(reasons=lambda h: NVMLError(NOT_SUPPORTED) if h == 6 else GPUS[h]["sample"]["reasons"]))
    bus = GPUS[6]["bus"]
    assert part["nvml"][bus]["reasons"] == [None] * 30 and part["nvml_unsupported"] == {bus: ["reasons"]}
    assert not part["nvml_findings"] and not part["nvml_api"]
    summary = burn.summarize(vburn.samples([[100.0 + k, 500.0] for k in range(30)], part["nvml"][bus], 100.0))
    assert summary.throttled is None and summary.reasons_read == 0
    rows = node_rows(part)
    assert rows["h100:6"].status == "PASS"
    assert "clocks event reasons unknown (not read)" in rows["h100:6"].reason
    assert "NVML gives no reasons for it (NotSupported: unknown)" in rows["h100:6"].reason
    assert "throttled 0% of 29 samples (none)" in rows["h100:0"].reason   # read, and none set


def test_sw_power_cap_alone_is_at_its_power_limit_not_throttled():
    """The capped recording's GPU 2 with its SW Power Cap alone active (an H100 busy at full load shows just that),
    and with all three of its recorded reasons (SW Power Cap, SW Thermal, HW Power Brake)."""
    r = GPUS[2]["sample"]
    alone = [burn.Sample(t=float(t), **dict(r, reasons=burn.POWER_CAP)) for t in range(180)]
    (v,) = burn.judge({"h100:2": alone})
    assert (v.status, v.summary.throttled, v.summary.at_power_limit, v.summary.by_reason) == ("PASS", 0.0, 1.0, {})
    assert "throttled 0% of 180 samples (none); at its power limit 100% (SW power cap: normal under load)" in v.line
    recorded = burn.summarize([burn.Sample(t=float(t), **r) for t in range(180)])
    assert r["reasons"] == 0x4 | 0x20 | 0x80   # nvml.h: SwPowerCap, SwThermalSlowdown, HwPowerBrakeSlowdown
    assert (recorded.throttled, recorded.at_power_limit) == (1.0, 1.0)
    assert recorded.by_reason == {"sw_thermal": 1.0, "hw_power_brake": 1.0}


def test_a_pynvml_without_a_function_is_recorded_once_and_a_missing_constant_takes_nvml_h_s_value():
    nvml = fake_nvml(drop={"nvmlDeviceGetCurrentClocksEventReasons", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"})
    part = sampled(nvml)
    assert part["nvml_api"] == ["nvmlDeviceGetCurrentClocksEventReasons: pynvml has no such function (nor "
                                "nvmlDeviceGetCurrentClocksThrottleReasons)"]
    cols = part["nvml"][GPUS[0]["bus"]]
    assert cols["reasons"] == [None] * 30 and cols["sm_mhz"] == [GPUS[0]["sample"]["sm_mhz"]] * 30
    rows = node_rows(part)
    assert rows["h100"].status == "WARN" and "NVML API: nvmlDeviceGetCurrentClocksEventReasons" in rows["h100"].value


def test_the_sampler_thread_s_death_is_recorded_and_the_node_row_warns():
    s = Sampler(0.01, nvml=fake_nvml(reasons=lambda h: "SW Power Cap"))   # a binding that changed its return
    assert s.open()
    s.start()
    s.join(timeout=5)
    part = s.stop()
    assert part["nvml_died"].startswith("ValueError: invalid literal for int()") and "after 0 sample(s)" in \
        part["nvml_died"]
    rows = node_rows(part)
    assert rows["h100"].status == "WARN" and "NVML's sampler thread died: ValueError" in rows["h100"].value
    assert "NVML sampled" not in vburn_said(part)


def vburn_said(part: dict) -> str:
    from bench.worker.burn import _said
    return _said(part)
