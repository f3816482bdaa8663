"""A node hot at once: every rank trains for a fixed time after its timed steps, one thread per node samples NVML.

    rec = run(run_dir, rank, plan, engine, batches, device, local, cfg)   # plan.json "burn": {"seconds",
                                                                         #   "interval_s", "barrier"}
    rec["intervals"]          # [[t, images/s], ...]: t the interval's end, seconds since the epoch
    rec["nvml"]               # local rank 0 only: {bus id: {"t": [...], "sm_mhz": [...], ...}}, or None
    rec["nvml_error"]         # why there is none ("no NVML here: ...")

Run by validate's per-GPU launch after its timed steps (bench.worker.main),
behind a barrier held by bench, so every GPU of every node is busy at once
for the whole burn. Each rank keeps its step ends and turns them into its
throughput per interval (intervals). The node's local rank 0 runs a thread
that reads every GPU of the node through NVML once per interval: SM and
memory clocks, temperature, power and its enforced limit, the clocks event
reasons bitmask, and at the end the Xid events NVML delivered meanwhile and
the volatile ECC counts raised (end less start). A GPU NVML cannot read a
field of (NotSupported: GeForce cards) has None there. On a CPU node there
is no NVML: nvml is None and nvml_error says so; the throughput series runs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

from bench.core.results import write_json_atomic
from bench.core.storage import subdir

FIELDS = ("t", "sm_mhz", "mem_mhz", "temp_c", "power_w", "power_limit_w", "reasons")


class _Stop(Exception):
    """The burn's time is up: raised from the step callback to end the training loop."""


def intervals(ends: list[float], start: float, every: float, images: float) -> list[list[float]]:
    """[[t, images/s], ...] per `every` seconds from start: the steps that ended in an interval over the time from
    the end of the step before them to the last one's end; an interval no step ended in takes the rate of the step
    that spans it. Pure (tests)."""
    out: list[list[float]] = []
    if not ends:
        return out
    k, prev, t = 0, start, start + every
    while t <= ends[-1] + 1e-9:
        mine = []
        while k < len(ends) and ends[k] <= t:
            mine.append(ends[k])
            k += 1
        if mine:
            out.append([round(t, 3), images * len(mine) / max(mine[-1] - prev, 1e-9)])
            prev = mine[-1]
        elif k < len(ends):
            out.append([round(t, 3), images / max(ends[k] - prev, 1e-9)])
        t += every
    return out


class Sampler(threading.Thread):
    """Every GPU of this node through NVML, once per `every` seconds, until stop(); columns per bus id."""

    def __init__(self, every: float = 1.0, nvml=None):
        super().__init__(name="bench-burn-nvml", daemon=True)
        self.every, self.nvml = every, nvml
        self.columns: dict[str, dict[str, list]] = {}
        self.xids: list[dict] = []
        self.ecc: dict[str, dict[str, int | None]] = {}
        self.error: str | None = None
        self._stop_at = threading.Event()
        self._handles: dict[str, object] = {}
        self._events = None

    def open(self) -> bool:
        """NVML up and every GPU's handle taken; False (error says why) where there is none."""
        try:
            if self.nvml is None:
                import pynvml
                self.nvml = pynvml
            self.nvml.nvmlInit()
            for i in range(self.nvml.nvmlDeviceGetCount()):
                h = self.nvml.nvmlDeviceGetHandleByIndex(i)
                bus = _text(self.nvml.nvmlDeviceGetPciInfo(h).busId)
                self._handles[bus] = h
                self.columns[bus] = {k: [] for k in FIELDS}
        except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.error = f"no NVML here: {type(e).__name__}: {e}".strip(": ")
            return False
        if not self._handles:
            self.error = "no NVML here: NVML lists no GPU on this node"
            return False
        self.ecc = {b: {"start": self._ecc(h)} for b, h in self._handles.items()}
        with contextlib.suppress(Exception):
            self._events = self.nvml.nvmlEventSetCreate()
            for h in self._handles.values():
                with contextlib.suppress(Exception):
                    self.nvml.nvmlDeviceRegisterEvents(h, self.nvml.nvmlEventTypeXidCriticalError, self._events)
        return True

    def _ecc(self, h) -> int | None:
        n = self.nvml
        with contextlib.suppress(Exception):
            return int(n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC))
        return None

    def _one(self, h, now: float) -> dict:
        n = self.nvml

        def get(fn, *args, scale: float = 1.0):
            with contextlib.suppress(Exception):
                return fn(h, *args) / scale
            return None

        reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(n, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return {"t": round(now, 3), "sm_mhz": get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
                "mem_mhz": get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
                "temp_c": get(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
                "power_w": get(n.nvmlDeviceGetPowerUsage, scale=1000.0),
                "power_limit_w": get(n.nvmlDeviceGetEnforcedPowerLimit, scale=1000.0),
                "reasons": int(get(reasons) or 0)}

    def sample(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for bus, h in self._handles.items():
            for k, v in self._one(h, now).items():
                self.columns[bus][k].append(v)

    def _drain_xids(self, wait_ms: int) -> None:
        if self._events is None:
            return
        with contextlib.suppress(Exception):
            while True:
                e = self.nvml.nvmlEventSetWait_v2(self._events, wait_ms)
                bus = _text(self.nvml.nvmlDeviceGetPciInfo(e.device).busId)
                self.xids.append({"t": round(time.time(), 3), "bus_id": bus, "xid": int(e.eventData)})
                wait_ms = 0

    def run(self) -> None:
        while not self._stop_at.is_set():
            t0 = time.monotonic()
            self.sample()
            self._drain_xids(0)
            self._stop_at.wait(max(0.0, self.every - (time.monotonic() - t0)))

    def stop(self) -> dict:
        """Ends the thread; the record's part: {"nvml", "nvml_error", "xids", "ecc"}."""
        self._stop_at.set()
        if self.is_alive():
            self.join(timeout=5)
        if self.error is None:
            self._drain_xids(0)
            for b, h in self._handles.items():
                self.ecc[b]["end"] = self._ecc(h)
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
        return {"nvml": self.columns if self.error is None else None, "nvml_error": self.error, "xids": self.xids,
                "ecc": self.ecc}


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def run(run_dir: str, rank: int, plan: dict, engine, batches, device, local: int, cfg) -> dict:
    """Train for the burn's seconds behind its barrier (every GPU at once); written to burn/rank<R>.json."""
    from bench.worker import loop
    from bench.worker.barrier import wait
    from bench.worker.bootstrap import progress

    spec = plan["burn"]
    seconds, every = float(spec["seconds"]), float(spec.get("interval_s") or 1.0)
    sampler = Sampler(every) if local == 0 else None
    sampling = sampler is not None and sampler.open()
    wait(spec["barrier"], rank, per_rank=True)
    start = time.time()
    if sampling:
        sampler.start()
    ends: list[float] = []
    said = [start]

    def on_step(step: int, times) -> None:
        now = time.time()
        ends.append(now)
        if now - said[0] >= 5:
            said[0] = now
            progress(run_dir, {"step": step + 1, "total": 0, "loss": times.loss[-1], "phase": "burn",
                               "elapsed_s": now - start, "time": now})
        if now - start >= seconds:
            raise _Stop

    with contextlib.suppress(_Stop):
        loop.train(engine, batches, total_steps=1 << 30, accum=cfg.grad_accum, device=device, on_step=on_step)
    part = sampler.stop() if sampler is not None else {}
    import torch

    from bench.worker.copies import bus_id_of

    rec = {"rank": rank, "local_rank": local, "host": socket.gethostname(), "status": "ok", "seconds": seconds,
           "interval_s": every, "start": round(start, 3), "steps": len(ends), "bus_id": bus_id_of(torch, device),
           "intervals": intervals(ends, start, every, cfg.micro_batch * cfg.grad_accum), **part}
    write_json_atomic(os.path.join(subdir(run_dir, "burn"), f"rank{rank}.json"), rec)
    print(f"burn: {len(ends)} steps in {time.time() - start:.1f} s"
          + (f"; {part.get('nvml_error') or 'NVML sampled'}" if part else ""), flush=True)
    return rec
