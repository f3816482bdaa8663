"""The burn's amdsmi sampler: every AMD GPU of the node once per interval (local rank 0's thread), where amdsmi is.

    s = Sampler(1.0)                 # amdsmi=a stand-in in tests
    s.open()                         # False where the amdsmi package or its library is absent (s.error says why)
    s.start(); ...; part = s.stop()  # the record's part, in the NVIDIA sampler's keys (bench.worker.burn)

Import-light: a rank runs it (bench.worker.burn picks it for a plan whose
"accel" is amd). The readings and their units are amdsmi's Python interface
as ROCm/amdsmi @0ceca28f (2024-10) implements it: amdsmi_get_clock_info's
"clk" (MHz, from the GPU metrics' current clocks), amdsmi_get_temp_metric
(degrees C: the library divides the kernel's millidegrees by 1000, though
amdsmi.h's comment still says millidegrees), amdsmi_get_power_info's
"current_socket_power" (W; 0xFFFF where the GPU reports none, then
"average_socket_power"), amdsmi_get_power_cap_info's "power_cap" (uW, as its
README's table says). The hotspot (junction) sensor is read: MI300 reports
no edge temperature. Clock event reasons have no amdsmi reading here: None,
unknown, never "not throttled". No amdsmi exists on this machine: only the
absent path runs here; the rest is written to that interface.
"""

from __future__ import annotations

import threading
import time

# The record's columns, as the NVIDIA sampler's (bench.cluster.accel.nvidia.sampler.FIELDS; the backends import
# nothing of each other, a unit test holds them equal).
FIELDS = ("t", "sm_mhz", "mem_mhz", "temp_c", "power_w", "power_limit_w", "reasons")

NOT_REPORTED = 0xFFFF   # amdsmi's power fields where the GPU metrics have no value


class Sampler(threading.Thread):
    """Every GPU amdsmi lists, once per `every` seconds, until stop(); columns per bus id."""

    def __init__(self, every: float = 1.0, amdsmi=None):
        super().__init__(name="bench-burn-amdsmi", daemon=True)
        self.every, self.amdsmi = every, amdsmi
        self.columns: dict[str, dict[str, list]] = {}
        self.error: str | None = None                   # amdsmi absent: nothing sampled on this node
        self.findings: dict[str, list[str]] = {}        # per GPU: what amdsmi failed on, once per function
        self.died: str | None = None
        self.samples = 0
        self._handles: dict[str, object] = {}
        self._stop_at = threading.Event()

    def open(self) -> bool:
        """amdsmi up and each GPU's handle by its bus id; False (error says why) where amdsmi is absent."""
        try:
            if self.amdsmi is None:
                import amdsmi
                self.amdsmi = amdsmi
            self.amdsmi.amdsmi_init()
            handles = list(self.amdsmi.amdsmi_get_processor_handles())
        except Exception as e:  # noqa: BLE001 - ImportError, the library absent, no driver loaded, ...
            self.error = f"no amdsmi here: {type(e).__name__}: {e}".strip(": ")
            return False
        for i, h in enumerate(handles):
            try:
                bus = str(self.amdsmi.amdsmi_get_gpu_device_bdf(h)).lower()
            except Exception as e:  # noqa: BLE001 - that GPU's finding; the others are sampled
                bus = f"index {i}"
                self._finding(bus, f"amdsmi_get_gpu_device_bdf: {e}")
            self._handles[bus] = h
            self.columns[bus] = {k: [] for k in FIELDS}
        return True

    def _finding(self, gpu: str, what: str) -> None:
        said = self.findings.setdefault(gpu, [])
        line = f"amdsmi: GPU {gpu} {what}"
        if line not in said:
            said.append(line)

    def _read(self, gpu: str, name: str, *args):
        try:
            return getattr(self.amdsmi, name)(*args)
        except Exception as e:  # noqa: BLE001 - one reading of one GPU: unknown, said once
            self._finding(gpu, f"{name}: {type(e).__name__}: {e}")
            return None

    def _sample(self, bus: str, h) -> None:
        a = self.amdsmi
        gfx = self._read(bus, "amdsmi_get_clock_info", h, a.AmdSmiClkType.GFX)
        mem = self._read(bus, "amdsmi_get_clock_info", h, a.AmdSmiClkType.MEM)
        temp = self._read(bus, "amdsmi_get_temp_metric", h, a.AmdSmiTemperatureType.HOTSPOT,
                          a.AmdSmiTemperatureMetric.CURRENT)
        power = self._read(bus, "amdsmi_get_power_info", h) or {}
        cap = self._read(bus, "amdsmi_get_power_cap_info", h) or {}
        watts = next((float(power[k]) for k in ("current_socket_power", "average_socket_power")
                      if isinstance(power.get(k), (int, float)) and power[k] != NOT_REPORTED), None)
        limit = cap.get("power_cap")
        row = {"t": round(time.time(), 3), "sm_mhz": (gfx or {}).get("clk"), "mem_mhz": (mem or {}).get("clk"),
               "temp_c": temp, "power_w": watts,
               "power_limit_w": limit / 1e6 if isinstance(limit, (int, float)) else None, "reasons": None}
        for k in FIELDS:
            self.columns[bus][k].append(row[k])

    def run(self) -> None:
        try:
            while not self._stop_at.is_set():
                for bus, h in self._handles.items():
                    self._sample(bus, h)
                self.samples += 1
                self._stop_at.wait(self.every)
        except Exception as e:  # noqa: BLE001 - the thread's death is the record's, not the rank's
            self.died = f"{type(e).__name__}: {e} after {self.samples} sample(s)"

    def stop(self) -> dict:
        """Ends the thread; the record's part, in the keys the burn's record has for every vendor ("nvml" the
        columns by bus id or None, "nvml_error" why none)."""
        self._stop_at.set()
        if self.is_alive():
            self.join(timeout=5)
        if self.error is None:
            try:
                self.amdsmi.amdsmi_shut_down()
            except Exception:  # noqa: BLE001, S110 - shutting down: nothing left to read
                pass
        return {"nvml": self.columns if self.error is None else None, "nvml_error": self.error, "xids": [],
                "ecc": {}, "nvml_findings": {g: f for g, f in self.findings.items() if f}, "nvml_lost": [],
                "nvml_unsupported": {}, "nvml_api": [], "nvml_died": self.died}
