"""A rank's copies: to and from its host, within its memory; each GPU alone on its node, then all of them at once.

    rec = run(run_dir, rank, plan, device, local)     # plan.json "copies": {"host_mb", "memory_mb", "iters",
                                                      #   "lock", "barrier": {"name", "count", "timeout_s"}}
    rec["phases"]["alone"]["h2d"]                     # GB/s (1e9 bytes/s)

Run by validate's per-GPU launch after the numerics job, before the rank
builds its model (bench.worker.main). Two phases, the same copies in each:
  alone     the node's ranks take turns (an fcntl.flock on a node-local file
            under /tmp named by the run and the machine's boot id: never the
            shared run directory; hosts that share a kernel, containers or the
            suite's namespace hosts, share its memory and take turns together),
            each copying while its node's other GPUs are idle;
  together  every rank at once, behind barriers held by bench (phone): a
            shared PCIe switch, a root port or a wrong NUMA binding shows only then.
On a GPU (bench.worker.gpu_copies), from pinned host memory and back: h2d,
d2h, both (the two at once on two streams: their bytes summed), and d2d (a
copy within the GPU's memory, its bytes read and written both counted, as
CUDA's bandwidthTest counts them); each copy timed with CUDA events; alone,
the median of `iters` copies after one untimed; all at once, each kind behind
its own barrier, the median copy of a window of gpu_copies.WINDOW_S, so the
node's ranks copy the same kind at the same time. The buffers are made once
before the first barrier and freed after, pinned ones too where torch can.
On a CPU rank the same code copies between two host buffers: "host" (counted
once, like h2d) and d2d (a larger memcpy, read and write counted), timed by
the host clock, which counts whatever else ran on the core meanwhile (another
process's exit, bench's own work, the hypervisor): alone, the best of
CPU_WINDOWS windows in each of CPU_TURNS turns a barrier apart (the mean copy
of each window; as STREAM reports its best of several trials: a slow path is
slow in every window, a passing interruption is not); all at once, the mean
over one window (ranks that share cores time-slice, and a best window would
pick whichever the scheduler left alone). Every turn's figures are kept.
Beside the figures: the rank's CPUs, their NUMA nodes, its GPU's bus id, NUMA
node and PCIe link from sysfs (bench.worker.binding; None where not known),
the link's speed now read again after the copies (an idle GPU lowers it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time

from bench.core.results import write_json_atomic
from bench.core.storage import subdir
from bench.worker.binding import binding, pci_device

CPU_TURNS, CPU_WINDOWS = 2, 3   # a CPU rank's alone figure: the best of 3 windows in each of 2 turns


class _Timer:
    """Seconds of one run of fn on a CPU rank, after one untimed: the best of `windows` windows of the mean run over
    CPU_S / windows seconds (and `iters` runs at least) by the host clock: see the module's doc. (A GPU's copies
    are timed by CUDA events: bench.worker.gpu_copies.)"""

    CPU_S = 0.1  # dozens of copies of a CPU's 32 MiB; each rank's turn alone is then truly alone (by boot id)

    def __init__(self, torch, device, windows: int = 1):
        self.torch, self.windows = torch, max(1, windows)

    def _window(self, fn, iters: int, span: float) -> float:
        n, t0 = 0, time.perf_counter()
        while n < iters or time.perf_counter() - t0 < span:
            fn()
            n += 1
        return (time.perf_counter() - t0) / n

    def seconds(self, fn, iters: int) -> float:
        fn()
        return min(self._window(fn, iters, self.CPU_S / self.windows) for _ in range(self.windows))


def _memory(torch, device, m: int, iters: int, timer: _Timer) -> float:
    """GB/s of a copy of m bytes within the device's memory, its read and its write both counted."""
    src, dst = torch.empty(m, dtype=torch.uint8, device=device), torch.empty(m, dtype=torch.uint8, device=device)
    src.fill_(1)
    return 2 * m / timer.seconds(lambda: dst.copy_(src), iters) / 1e9


def measure(torch, device, host_mb: int, memory_mb: int, iters: int, windows: int = 1) -> dict[str, float]:
    """GB/s of a CPU rank's kinds (see the module's doc): host, d2d (the best of `windows` windows)."""
    n, m = host_mb << 20, memory_mb << 20
    timer = _Timer(torch, device, windows)
    out: dict[str, float] = {}
    a, b = torch.empty(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
    a.fill_(1)
    out["host"] = n / timer.seconds(lambda: b.copy_(a), iters) / 1e9
    del a, b
    out["d2d"] = _memory(torch, device, m, iters, timer)
    return out


def machine_id() -> str:
    """The kernel this rank runs on (/proc/sys/kernel/random/boot_id), else its hostname: "alone on its node" means
    alone on its machine's memory and PCIe, and hosts that share one kernel (containers, network namespaces, as
    the suite's hosts do) share those too."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def lock_path(stem: str, run_dir: str) -> str:
    """The machine-local file the machine's ranks take turns on: the run and the machine in its name (never in
    --out)."""
    return f"{stem}-{os.path.basename(os.path.normpath(run_dir))}-{machine_id()}.lock"


@contextlib.contextmanager
def turn(path: str):
    """This rank's turn alone on its node: an exclusive flock on path (blocking), released on leaving."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _cpu_phases(torch, device, spec: dict, rank: int, path: str, wait, progress, run_dir: str) -> dict:
    """A CPU rank's turns alone and its copy all at once (the module's doc): {"alone", "together", "turns",
    "waited", "turn_at"}."""
    barrier = spec["barrier"]
    turns, turn_at, waited = [], 0.0, 0.0
    for k in range(CPU_TURNS):
        waited += wait({**barrier, "name": f"{barrier['name']}-alone" + (f"{k + 1}" if k else "")}, rank,
                       per_rank=True)
        t1 = time.time()
        with turn(path):
            turn_at += time.time() - t1
            turns.append(measure(torch, device, spec["host_mb"], spec["memory_mb"], spec["iters"], CPU_WINDOWS))
    alone = {kind: max(t[kind] for t in turns) for kind in turns[0]}
    progress(run_dir, {"step": 0, "total": 0, "loss": 0.0, "phase": "copies", "time": time.time()})
    wait({**barrier, "name": f"{barrier['name']}-together"}, rank, per_rank=True)
    together = measure(torch, device, spec["host_mb"], spec["memory_mb"], spec["iters"])
    return {"alone": alone, "together": together, "turns": turns, "waited": waited, "turn_at": turn_at,
            "timed": f"alone: the best of {CPU_WINDOWS} windows of {_Timer.CPU_S / CPU_WINDOWS:.3g} s in each of "
                     f"{CPU_TURNS} turns (each window's mean copy); all at once: the mean copy over {_Timer.CPU_S:g}"
                     " s; host clock"}


def _gpu_phases(torch, device, spec: dict, rank: int, path: str, wait, progress, run_dir: str) -> dict:
    """A GPU rank's turn alone and each kind all at once behind its own barrier (bench.worker.gpu_copies)."""
    from bench.worker.gpu_copies import KINDS, WINDOW_S, GpuCopies

    barrier = spec["barrier"]
    copies = GpuCopies(torch, device, spec["host_mb"], spec["memory_mb"])   # filled before any barrier
    waited = wait({**barrier, "name": f"{barrier['name']}-alone"}, rank, per_rank=True)
    t1 = time.time()
    with turn(path):
        turn_at = time.time() - t1
        alone = {kind: copies.gbps(kind, spec["iters"]) for kind in KINDS}
    progress(run_dir, {"step": 0, "total": 0, "loss": 0.0, "phase": "copies", "time": time.time()})
    together, made = {}, {}
    for kind in KINDS:
        waited += wait({**barrier, "name": f"{barrier['name']}-together-{kind}"}, rank, per_rank=True)
        together[kind], made[kind] = copies.window(kind, WINDOW_S)
    return {"alone": alone, "together": together, "turns": [alone], "waited": waited, "turn_at": turn_at,
            "together_copies": made, "pinned": copies.free(),
            "timed": f"CUDA events; alone: the median of {spec['iters']} copies; all at once: each kind behind its "
                     f"own barrier, the median copy of a {WINDOW_S:g} s window"}


def run(run_dir: str, rank: int, plan: dict, device, local: int) -> dict:
    """The copies of this rank, both phases; written to copies/rank<R>.json and returned."""
    import torch

    from bench.worker.barrier import wait
    from bench.worker.bootstrap import progress

    spec = plan["copies"]
    where = binding(torch, device)
    path = lock_path(spec.get("lock") or "/tmp/vitbench-copies", run_dir)
    t0 = time.time()
    phases = (_gpu_phases if device.type == "cuda" else _cpu_phases)(torch, device, spec, rank, path, wait,
                                                                    progress, run_dir)
    if where.get("bus_id"):  # the speed its link trained to while busy (an idle GPU lowers it)
        now = pci_device(where["bus_id"])
        where.update(pcie_gen_now=now["pcie_gen_now"], pcie_width_now=now["pcie_width_now"])
    if local == 0:  # every rank of the node had its turn before the barrier let anyone on
        with contextlib.suppress(OSError):
            os.unlink(path)
    waited, alone = phases["waited"], phases["alone"]
    rec = {"rank": rank, "local_rank": local, "host": socket.gethostname(), "status": "ok", "device": device.type,
           "binding": where, "phases": {"alone": alone, "together": phases["together"]},
           "alone_turns": phases["turns"],
           "sizes": {"host_mb": spec["host_mb"], "memory_mb": spec["memory_mb"], "iters": spec["iters"],
                     "timed": phases["timed"]},
           **{k: phases[k] for k in ("together_copies", "pinned") if k in phases},
           "took_s": round(time.time() - t0 - waited, 3),
           "waited_s": {"barrier": round(waited, 3), "turn": round(phases["turn_at"], 3)}}
    write_json_atomic(os.path.join(subdir(run_dir, "copies"), f"rank{rank}.json"), rec)
    said = ", ".join(f"{k} {v:.2f}" for k, v in alone.items())
    print(f"copies: alone {said} GB/s; cpus {where['cpus']} (NUMA {where['cpu_numa_nodes']}), GPU NUMA "
          f"{where['numa_node']}" + (f"; {phases['pinned']}" if "pinned" in phases else ""), flush=True)
    return rec
