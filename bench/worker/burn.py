"""A node hot at once: every rank trains for a fixed time after its timed steps, one thread per node samples its GPUs.

    rec = run(run_dir, rank, plan, engine, batches, device, local, cfg)   # plan.json "burn": {"seconds",
                                                                         #   "interval_s", "barrier"}
    rec["intervals"]          # [[t, images/s], ...]: t the interval's end, seconds since the epoch
    rec["nvml"]               # local rank 0 only: {bus id: {"t": [...], "sm_mhz": [...], ...}}, or None
    rec["nvml_error"]         # why there is none (the sampler's "no ... here: ...")
    rec["nvml_findings"]      # per GPU, what the sampler failed on (bench.cluster.accel.nvidia.sampler); nvml_died, nvml_api

Run by validate's per-GPU launch after its timed steps (bench.worker.main),
behind a barrier held by bench, so every GPU of every node is busy at once
for the whole burn. Each rank keeps its step ends and turns them into its
throughput per interval (intervals). The node's local rank 0 runs a thread
that reads every GPU of the node through the vendor's management library
once per interval (the GPU backend's sampler): SM and memory clocks,
temperature, power and its enforced limit, the clocks event reasons bitmask,
and at the end the Xid events delivered meanwhile and the volatile ECC
counts raised (end less start). Each GPU is read on its own
(bench.cluster.accel.nvidia.sampler): one the library cannot open or read is
that GPU's finding, the others are sampled; a field it cannot read
(NotSupported: GeForce cards) is None, unknown. On a CPU node there is no
sampler: nvml is None and nvml_error says so; the throughput series runs.
The sampler is the plan's backend's (sampler_for: AMD's through amdsmi,
bench.cluster.accel.amd.sampler, in the same record keys), NVIDIA's else.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

from bench.core.accel_names import GPU_SAMPLER
from bench.core.results import write_json_atomic
from bench.core.storage import subdir
from bench.cluster.accel.amd.sampler import Sampler as AmdSampler
from bench.cluster.accel.nvidia.sampler import FIELDS, Sampler  # noqa: F401 - the record's columns; the sampler's home

# The sampler of the plan's backend (plan.json "accel", bench.launch.plan): AMD's through amdsmi, else NVIDIA's
# (a plan naming none: as before; on CPU ranks its own "no ... here" says why nothing is sampled).
SAMPLERS = {"amd": AmdSampler}


def sampler_for(plan: dict, every: float):
    """The burn's sampler for the node's devices, chosen by the backend the plan names."""
    return SAMPLERS.get(plan.get("accel") or "", Sampler)(every)


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


def run(run_dir: str, rank: int, plan: dict, engine, batches, device, local: int, cfg) -> dict:
    """Train for the burn's seconds behind its barrier (every GPU at once); written to burn/rank<R>.json."""
    from bench.worker import loop
    from bench.worker.barrier import wait
    from bench.worker.bootstrap import progress

    spec = plan["burn"]
    seconds, every = float(spec["seconds"]), float(spec.get("interval_s") or 1.0)
    sampler = sampler_for(plan, every) if local == 0 else None
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

    from bench.worker.binding import bus_id_of

    rec = {"rank": rank, "local_rank": local, "host": socket.gethostname(), "status": "ok", "seconds": seconds,
           "interval_s": every, "start": round(start, 3), "steps": len(ends), "bus_id": bus_id_of(torch, device),
           "intervals": intervals(ends, start, every, cfg.micro_batch * cfg.grad_accum), **part}
    write_json_atomic(os.path.join(subdir(run_dir, "burn"), f"rank{rank}.json"), rec)
    print(f"burn: {len(ends)} steps in {time.time() - start:.1f} s" + (f"; {_said(part)}" if part else ""),
          flush=True)
    return rec


def _said(part: dict) -> str:
    """The sampler's part in the rank's one log line: never "... sampled" where a GPU or the thread failed."""
    if part.get("nvml_error"):
        return part["nvml_error"]
    bad = [f for fs in (part.get("nvml_findings") or {}).values() for f in fs] + list(part.get("nvml_api") or [])
    head = f"{GPU_SAMPLER}'s sampler died: {part['nvml_died']}" if part.get("nvml_died") else \
        f"{GPU_SAMPLER} sampled {len(part.get('nvml') or {})} GPU(s)"
    return head + (f"; {'; '.join(bad)}" if bad else "")
