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
  together  every rank at once, behind a barrier held by bench (phone): a
            shared PCIe switch, a root port or a wrong NUMA binding shows only then.
On a GPU, from pinned host memory and back: h2d, d2h, both (the two at once
on two streams: their bytes summed), and d2d (a copy within the GPU's memory,
its bytes read and written both counted, as CUDA's bandwidthTest counts them);
each timed with CUDA events, the median of `iters` copies after one untimed.
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
node and PCIe link from sysfs (None where not known).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import statistics
import time

from bench.core.results import write_json_atomic
from bench.core.storage import subdir

CPU_TURNS, CPU_WINDOWS = 2, 3   # a CPU rank's alone figure: the best of 3 windows in each of 2 turns
GTS_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def cpu_list(cpus) -> str:
    """{0, 1, 2, 5} -> "0-2,5" (the kernel's cpulist form)."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in (text or "").strip().split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        elif part.strip().isdigit():
            out.add(int(part))
    return out


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_nodes(cpus, root: str = "/sys") -> list[int] | None:
    """The NUMA nodes of these CPUs (/sys/devices/system/node/node<N>/cpulist); None where sysfs has none."""
    base = os.path.join(root, "devices", "system", "node")
    try:
        names = [n for n in os.listdir(base) if re.fullmatch(r"node\d+", n)]
    except OSError:
        return None
    cpus = set(cpus)
    found = {int(n[4:]) for n in names if parse_cpu_list(_read(os.path.join(base, n, "cpulist")) or "") & cpus}
    return sorted(found) if names else None


def pci_device(bus_id: str | None, root: str = "/sys") -> dict:
    """A GPU's NUMA node and PCIe link as sysfs gives them: {"numa_node", "pcie_gen", "pcie_width"} (None each
    where not known: numa_node -1 is the kernel's 'not known')."""
    if not bus_id:
        return {"numa_node": None, "pcie_gen": None, "pcie_width": None}
    d = os.path.join(root, "bus", "pci", "devices", bus_id.lower())
    numa = _read(os.path.join(d, "numa_node"))
    speed = re.match(r"[\d.]+", _read(os.path.join(d, "max_link_speed")) or "")
    width = _read(os.path.join(d, "max_link_width")) or ""
    return {"numa_node": int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
            "pcie_gen": GTS_GEN.get(float(speed.group())) if speed else None,
            "pcie_width": int(width) if width.isdigit() else None}


def bus_id_of(torch, device) -> str | None:
    """The GPU's PCI address as sysfs names it (0000:19:00.0); None on a CPU rank."""
    if device.type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"


def binding(torch, device, root: str = "/sys") -> dict:
    """Where the rank runs and where its GPU sits: its CPUs, their NUMA nodes, the GPU's bus id, NUMA node, link."""
    cpus = os.sched_getaffinity(0)
    bus = bus_id_of(torch, device)
    return {"cpus": cpu_list(cpus), "cpu_numa_nodes": cpu_nodes(cpus, root), "bus_id": bus, **pci_device(bus, root)}


class _Timer:
    """Seconds of one run of fn, after one untimed: on a GPU the median of `iters` runs by CUDA events (the device's
    own time); on a CPU the best of `windows` windows of the mean run over CPU_S / windows seconds (and `iters` runs
    at least) by the host clock: see the module's doc."""

    CPU_S = 0.1  # dozens of copies of a CPU's 32 MiB; each rank's turn alone is then truly alone (by boot id)

    def __init__(self, torch, device, windows: int = 1):
        self.torch, self.cuda, self.windows = torch, device.type == "cuda", max(1, windows)

    def _window(self, fn, iters: int, span: float) -> float:
        n, t0 = 0, time.perf_counter()
        while n < iters or time.perf_counter() - t0 < span:
            fn()
            n += 1
        return (time.perf_counter() - t0) / n

    def seconds(self, fn, iters: int) -> float:
        torch = self.torch
        fn()
        if not self.cuda:
            return min(self._window(fn, iters, self.CPU_S / self.windows) for _ in range(self.windows))
        times = []
        for _ in range(iters):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        return statistics.median(times)


def _memory(torch, device, m: int, iters: int, timer: _Timer) -> float:
    """GB/s of a copy of m bytes within the device's memory, its read and its write both counted."""
    src, dst = torch.empty(m, dtype=torch.uint8, device=device), torch.empty(m, dtype=torch.uint8, device=device)
    src.fill_(1)
    return 2 * m / timer.seconds(lambda: dst.copy_(src), iters) / 1e9


def measure(torch, device, host_mb: int, memory_mb: int, iters: int, windows: int = 1) -> dict[str, float]:
    """GB/s of each kind on this rank's device (see the module's doc): h2d, d2h, both, d2d on a GPU; host, d2d on
    a CPU rank (the best of `windows` windows)."""
    n, m = host_mb << 20, memory_mb << 20
    timer = _Timer(torch, device, windows)
    out: dict[str, float] = {}
    if device.type == "cuda":
        pinned = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        pinned[0].fill_(1)
        dev = [torch.empty(n, dtype=torch.uint8, device=device) for _ in range(2)]
        s1, s2 = torch.cuda.Stream(device), torch.cuda.Stream(device)

        def both() -> None:
            now = torch.cuda.current_stream(device)
            s1.wait_stream(now)
            s2.wait_stream(now)
            with torch.cuda.stream(s1):
                dev[0].copy_(pinned[0], non_blocking=True)
            with torch.cuda.stream(s2):
                pinned[1].copy_(dev[1], non_blocking=True)
            now.wait_stream(s1)
            now.wait_stream(s2)

        out["h2d"] = n / timer.seconds(lambda: dev[0].copy_(pinned[0], non_blocking=True), iters) / 1e9
        out["d2h"] = n / timer.seconds(lambda: pinned[1].copy_(dev[1], non_blocking=True), iters) / 1e9
        out["both"] = 2 * n / timer.seconds(both, iters) / 1e9
        del pinned, dev
    else:
        a, b = torch.empty(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
        a.fill_(1)
        out["host"] = n / timer.seconds(lambda: b.copy_(a), iters) / 1e9
        del a, b
    out["d2d"] = _memory(torch, device, m, iters, timer)
    if device.type == "cuda":
        torch.cuda.empty_cache()
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


def run(run_dir: str, rank: int, plan: dict, device, local: int) -> dict:
    """The copies of this rank, both phases; written to copies/rank<R>.json and returned."""
    import torch

    from bench.worker.barrier import wait
    from bench.worker.bootstrap import progress

    spec = plan["copies"]
    barrier = spec["barrier"]
    where = binding(torch, device)
    path = lock_path(spec.get("lock") or "/tmp/vitbench-copies", run_dir)
    cpu = device.type != "cuda"
    turns, t0, turn_at, waited = [], time.time(), 0.0, 0.0
    for k in range(CPU_TURNS if cpu else 1):
        waited += wait({**barrier, "name": f"{barrier['name']}-alone" + (f"{k + 1}" if k else "")}, rank,
                       per_rank=True)
        t1 = time.time()
        with turn(path):
            turn_at += time.time() - t1
            turns.append(measure(torch, device, spec["host_mb"], spec["memory_mb"], spec["iters"],
                                 CPU_WINDOWS if cpu else 1))
    alone = {kind: max(t[kind] for t in turns) for kind in turns[0]}
    progress(run_dir, {"step": 0, "total": 0, "loss": 0.0, "phase": "copies", "time": time.time()})
    wait({**barrier, "name": f"{barrier['name']}-together"}, rank, per_rank=True)
    together = measure(torch, device, spec["host_mb"], spec["memory_mb"], spec["iters"])
    if local == 0:  # every rank of the node had its turn before the barrier let anyone on
        with contextlib.suppress(OSError):
            os.unlink(path)
    rec = {"rank": rank, "local_rank": local, "host": socket.gethostname(), "status": "ok", "device": device.type,
           "binding": where, "phases": {"alone": alone, "together": together}, "alone_turns": turns,
           "sizes": {"host_mb": spec["host_mb"], "memory_mb": spec["memory_mb"], "iters": spec["iters"],
                     "timed": "the median copy, CUDA events" if device.type == "cuda" else
                     f"alone: the best of {CPU_WINDOWS} windows of {_Timer.CPU_S / CPU_WINDOWS:.3g} s in each of "
                     f"{CPU_TURNS} turns (each window's mean copy); all at once: the mean copy over {_Timer.CPU_S:g}"
                     " s; host clock"},
           "took_s": round(time.time() - t0 - waited, 3),
           "waited_s": {"barrier": round(waited, 3), "turn": round(turn_at, 3)}}
    write_json_atomic(os.path.join(subdir(run_dir, "copies"), f"rank{rank}.json"), rec)
    said = ", ".join(f"{k} {v:.2f}" for k, v in alone.items())
    print(f"copies: alone {said} GB/s; cpus {where['cpus']} (NUMA {where['cpu_numa_nodes']}), GPU NUMA "
          f"{where['numa_node']}", flush=True)
    return rec
