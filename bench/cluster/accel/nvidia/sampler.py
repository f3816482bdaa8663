"""The burn's NVML sampler: every GPU of the node, each on its own, once per interval (local rank 0's thread).

    s = Sampler(1.0)                 # nvml=a pynvml stand-in in tests
    s.open()                         # False only where NVML itself is absent (s.error says why)
    s.start(); ...; part = s.stop()  # the record's part: see stop()

Each GPU is sampled on its own: a handle NVML cannot give (a GPU fallen off
the bus, "Unknown Error") or a call that fails on one GPU is that GPU's
finding, once per GPU and function, and the other GPUs are sampled on. A
reading NVML answers NotSupported (or FunctionNotFound: an older driver) is
unknown (None), never 0: a GeForce that cannot report its clocks event
reasons is not "not throttled". A pynvml that lacks a function, or whose
function raises something other than NVML's own error (a changed binding),
is recorded once with the function's name and the reading is None. The
thread records its own death (what killed it, after how many samples): the
burn's node row then WARNs instead of saying "NVML sampled".

A failed handle has no bus id from NVML; it is named as nvidia-smi names it,
by the driver's own list of GPUs (/proc/driver/nvidia/gpus, one folder per
bus id, in NVML's index order, which is PCI bus order) where that list is as
long as NVML's count, else "index N".

Values of NVML's constants and return codes are nvml.h's (NVIDIA/go-nvml
@2f9e261f gen/nvml/nvml.h, NVML API 13), used where a pynvml lacks the name.
"""

from __future__ import annotations

import os
import threading
import time

FIELDS = ("t", "sm_mhz", "mem_mhz", "temp_c", "power_w", "power_limit_w", "reasons")
NOT_SUPPORTED, TIMEOUT, FUNCTION_NOT_FOUND, GPU_IS_LOST = 3, 10, 13, 15   # nvml.h nvmlReturn_t
_CONST = {"NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2, "NVML_TEMPERATURE_GPU": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
          "NVML_VOLATILE_ECC": 0, "nvmlEventTypeXidCriticalError": 0x8}  # fmt: skip
REASONS_FNS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
DRIVER_GPUS = "/proc/driver/nvidia/gpus"


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _nvml_code(e: BaseException) -> int | None:
    """NVML's return code of pynvml's NVMLError (its .value); None for any other exception."""
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


class Sampler(threading.Thread):
    """Every GPU of this node through NVML, once per `every` seconds, until stop(); columns per bus id."""

    def __init__(self, every: float = 1.0, nvml=None, driver_gpus: str = DRIVER_GPUS):
        super().__init__(name="bench-burn-nvml", daemon=True)
        self.every, self.nvml, self.driver_gpus = every, nvml, driver_gpus
        self.columns: dict[str, dict[str, list]] = {}
        self.xids: list[dict] = []
        self.ecc: dict[str, dict[str, int | None]] = {}
        self.error: str | None = None                   # NVML absent: nothing sampled on this node
        self.findings: dict[str, list[str]] = {}        # per GPU (bus id, or "index N"): what NVML failed on it
        self.lost: list[str] = []                       # GPUs whose handle NVML could not give
        self.unsupported: dict[str, list[str]] = {}     # per GPU: readings NVML answers NotSupported
        self.api: list[str] = []                        # pynvml that lacks a function or raises other than NVML
        self.died: str | None = None                    # the thread's death, if it died
        self.samples = 0
        self._stop_at = threading.Event()
        self._handles: dict[str, object] = {}
        self._events = None
        self._said: set[tuple] = set()

    # --- what went wrong, each once -------------------------------------------------------------------------
    def _once(self, key: tuple) -> bool:
        if key in self._said:
            return False
        self._said.add(key)
        return True

    def _finding(self, gpu: str, what: str) -> None:
        if self._once(("finding", gpu, what)):
            self.findings.setdefault(gpu, []).append(f"NVML: GPU {gpu} {what}")

    def _api(self, fn: str, what: str) -> None:
        if self._once(("api", fn)):
            self.api.append(f"{fn}: {what}")

    def _const(self, name: str) -> int:
        return getattr(self.nvml, name, _CONST[name])

    def _fn(self, *names: str):
        for name in names:
            fn = getattr(self.nvml, name, None)
            if fn is not None:
                return name, fn
        self._api(names[0], "pynvml has no such function" + (f" (nor {', '.join(names[1:])})" if names[1:] else ""))
        return names[0], None

    def call(self, gpu: str, reading: str, names: tuple[str, ...], *args, scale: float = 1.0):
        """One reading of one GPU: its value, or None (NotSupported: unknown; another NVML error: that GPU's
        finding; anything else: the API's, once)."""
        name, fn = self._fn(*names)
        if fn is None:
            return None
        try:
            v = fn(*args)
            return v / scale if scale != 1.0 else v
        except Exception as e:  # noqa: BLE001 - sorted below: NVML's codes, or the binding's own failure
            code = _nvml_code(e)
            if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                if reading not in self.unsupported.setdefault(gpu, []):
                    self.unsupported[gpu].append(reading)
            elif code is not None:
                self._finding(gpu, f"{name}: {e}")
                if code == GPU_IS_LOST and gpu not in self.lost:
                    self.lost.append(gpu)
            else:
                self._api(name, f"{type(e).__name__}: {e}")
            return None

    # --- opening ------------------------------------------------------------------------------------------
    def _driver_order(self, count: int) -> list[str] | None:
        try:
            names = sorted(n for n in os.listdir(self.driver_gpus) if ":" in n)
        except OSError:
            return None
        return names if len(names) == count else None

    def open(self) -> bool:
        """NVML up and each GPU's handle taken where NVML gives it; False (error says why) where NVML is absent."""
        try:
            if self.nvml is None:
                import pynvml
                self.nvml = pynvml
            self.nvml.nvmlInit()
            count = int(self.nvml.nvmlDeviceGetCount())
        except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.error = f"no NVML here: {type(e).__name__}: {e}".strip(": ")
            return False
        order = None
        for i in range(count):
            try:
                h = self.nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:  # noqa: BLE001 - this GPU's finding; the others go on
                order = order or self._driver_order(count) or []
                gpu = order[i] if i < len(order) else f"index {i}"
                self._finding(gpu, f"{e}" if _nvml_code(e) is not None else f"{type(e).__name__}: {e}")
                self.lost.append(gpu)
                continue
            pci = self.call(f"index {i}", "pci", ("nvmlDeviceGetPciInfo",), h)
            bus = _text(pci.busId) if pci is not None else f"index {i}"   # unread: sampled under its index
            self._handles[bus] = h
            self.columns[bus] = {k: [] for k in FIELDS}
        if not self._handles and not self.lost:
            self.error = "no NVML here: NVML lists no GPU on this node"
            return False
        self.ecc = {b: {"start": self._ecc(b, h)} for b, h in self._handles.items()}
        try:
            self._events = self.nvml.nvmlEventSetCreate()
            for b, h in self._handles.items():
                self.call(b, "xid events", ("nvmlDeviceRegisterEvents",), h,
                          self._const("nvmlEventTypeXidCriticalError"), self._events)
        except Exception as e:  # noqa: BLE001 - Xids are the kernel log's too (the health check reads it)
            self._events = None
            if _nvml_code(e) not in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                self._api("nvmlEventSetCreate", f"{type(e).__name__}: {e}")
        return True

    # --- sampling -----------------------------------------------------------------------------------------
    def _ecc(self, bus: str, h) -> int | None:
        v = self.call(bus, "ecc", ("nvmlDeviceGetTotalEccErrors",), h,
                      self._const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED"), self._const("NVML_VOLATILE_ECC"))
        return None if v is None else int(v)

    def _one(self, bus: str, h, now: float) -> dict:
        clock = ("nvmlDeviceGetClockInfo",)
        reasons = self.call(bus, "reasons", REASONS_FNS, h)
        return {"t": round(now, 3), "sm_mhz": self.call(bus, "sm_mhz", clock, h, self._const("NVML_CLOCK_SM")),
                "mem_mhz": self.call(bus, "mem_mhz", clock, h, self._const("NVML_CLOCK_MEM")),
                "temp_c": self.call(bus, "temp_c", ("nvmlDeviceGetTemperature",), h,
                                    self._const("NVML_TEMPERATURE_GPU")),
                "power_w": self.call(bus, "power_w", ("nvmlDeviceGetPowerUsage",), h, scale=1000.0),
                "power_limit_w": self.call(bus, "power_limit_w", ("nvmlDeviceGetEnforcedPowerLimit",), h,
                                           scale=1000.0),
                "reasons": None if reasons is None else int(reasons)}

    def sample(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for bus, h in self._handles.items():
            for k, v in self._one(bus, h, now).items():
                self.columns[bus][k].append(v)
        self.samples += 1

    def _drain_xids(self, wait_ms: int) -> None:
        if self._events is None:
            return
        while True:
            try:
                e = self.nvml.nvmlEventSetWait_v2(self._events, wait_ms)
            except Exception as err:  # noqa: BLE001 - Timeout: no event waiting; else once, and no more waiting
                if _nvml_code(err) != TIMEOUT:
                    self._api("nvmlEventSetWait_v2", f"{type(err).__name__}: {err}")
                    self._events = None
                return
            pci = self.call("xid", "pci", ("nvmlDeviceGetPciInfo",), e.device)
            self.xids.append({"t": round(time.time(), 3), "bus_id": _text(pci.busId) if pci is not None else None,
                              "xid": int(e.eventData)})
            wait_ms = 0

    def run(self) -> None:
        try:
            while not self._stop_at.is_set():
                t0 = time.monotonic()
                self.sample()
                self._drain_xids(0)
                self._stop_at.wait(max(0.0, self.every - (time.monotonic() - t0)))
        except BaseException as e:  # noqa: BLE001 - the thread's death is the record's, not a silent end
            self.died = f"{type(e).__name__}: {e} (after {self.samples} sample(s))"

    def stop(self) -> dict:
        """Ends the thread; the record's part: {"nvml": {bus: columns} or None, "nvml_error", "xids", "ecc",
        "nvml_findings": {gpu: [line, ...]}, "nvml_lost": [gpu, ...], "nvml_unsupported": {gpu: [reading, ...]},
        "nvml_api": [line, ...], "nvml_died": str or None}."""
        self._stop_at.set()
        if self.is_alive():
            self.join(timeout=5)
        if self.error is None:
            self._drain_xids(0)
            for b, h in self._handles.items():
                self.ecc[b]["end"] = self._ecc(b, h)
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - shutting down: nothing left to read
                pass
        return {"nvml": self.columns if self.error is None else None, "nvml_error": self.error, "xids": self.xids,
                "ecc": self.ecc, "nvml_findings": {g: f for g, f in self.findings.items() if f},
                "nvml_lost": self.lost, "nvml_unsupported": self.unsupported, "nvml_api": self.api,
                "nvml_died": self.died}
