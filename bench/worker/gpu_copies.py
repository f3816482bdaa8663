"""A GPU rank's copies for validate: its buffers made once, each kind timed alone or over a window, then freed.

    c = GpuCopies(torch, device, host_mb=256, memory_mb=1024)
    c.gbps("h2d", iters=10)          # alone: the median of 10 copies after one untimed
    c.window("h2d", seconds=1.0)     # all at once: (GB/s, copies) over a window; bench.worker.copies holds the
                                     #   node's ranks behind a barrier per kind, so they copy that kind together
    c.free()                         # what became of the pinned buffers, in words

Kinds: h2d and d2h (pinned host memory to the GPU and back, one direction
at a time), both (the two at once on two streams, their bytes summed), d2d
(a copy within the GPU's memory, its read and write both counted, as CUDA's
bandwidthTest counts them). Each copy is timed by CUDA events (the device's
own time); the figure is the median copy's rate.

All at once, each kind runs for a fixed window (WINDOW_S) behind its own
barrier: eleven 256 MiB copies last 50-60 ms on a Gen5 GPU, shorter than the
skew of a barrier's release and of a rank's own host fill, so a shared PCIe
switch could show on one rank's copies and not its neighbour's. Over a
second, and with the fills done before the first barrier, every rank of the
node copies the same kind at the same time for almost all of its window.

Pinned host memory comes from torch's caching host allocator, which keeps
freed blocks for reuse: torch.cuda.empty_cache() frees device memory only,
and 512 MiB would stay pinned per rank for the rest of the run (the rank
goes on to train). torch._C._host_emptyCache() returns them (torch 2.14.1
has it, the Pascal image's 2.7.1 does not: its torch/_C/__init__.pyi lists
_cuda_emptyCache alone); where it is missing the record says so.
"""

from __future__ import annotations

import statistics
import time

WINDOW_S = 1.0     # all at once: each kind copied for this long (at least MIN_COPIES copies)
MIN_COPIES = 3
KINDS = ("h2d", "d2h", "both", "d2d")


class GpuCopies:
    def __init__(self, torch, device, host_mb: int, memory_mb: int):
        self.torch, self.device = torch, device
        n, m = host_mb << 20, memory_mb << 20
        self.pinned = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.pinned[0].fill_(1)
        self.dev = [torch.empty(n, dtype=torch.uint8, device=device) for _ in range(2)]
        self.mem = [torch.empty(m, dtype=torch.uint8, device=device) for _ in range(2)]
        self.mem[0].fill_(1)
        self.streams = (torch.cuda.Stream(device), torch.cuda.Stream(device))
        # (bytes a copy moves, counted as the module's doc says; the copy)
        self.kinds = {"h2d": (n, lambda: self.dev[0].copy_(self.pinned[0], non_blocking=True)),
                      "d2h": (n, lambda: self.pinned[1].copy_(self.dev[1], non_blocking=True)),
                      "both": (2 * n, self._both), "d2d": (2 * m, lambda: self.mem[1].copy_(self.mem[0]))}
        torch.cuda.synchronize(device)

    def _both(self) -> None:
        torch, (s1, s2) = self.torch, self.streams
        now = torch.cuda.current_stream(self.device)
        s1.wait_stream(now)
        s2.wait_stream(now)
        with torch.cuda.stream(s1):
            self.dev[0].copy_(self.pinned[0], non_blocking=True)
        with torch.cuda.stream(s2):
            self.pinned[1].copy_(self.dev[1], non_blocking=True)
        now.wait_stream(s1)
        now.wait_stream(s2)

    def _one(self, fn) -> float:
        torch = self.torch
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    def gbps(self, kind: str, iters: int) -> float:
        """GB/s of the median of `iters` copies of this kind, after one untimed."""
        size, fn = self.kinds[kind]
        fn()
        self.torch.cuda.synchronize(self.device)
        return size / statistics.median(self._one(fn) for _ in range(iters)) / 1e9

    def window(self, kind: str, seconds: float = WINDOW_S) -> tuple[float, int]:
        """(GB/s of the median copy, copies made) over `seconds` of back-to-back copies of this kind (MIN_COPIES
        at least), after one untimed."""
        size, fn = self.kinds[kind]
        fn()
        self.torch.cuda.synchronize(self.device)
        times, until = [], time.monotonic() + seconds
        while time.monotonic() < until or len(times) < MIN_COPIES:
            times.append(self._one(fn))
        return size / statistics.median(times) / 1e9, len(times)

    def free(self) -> str:
        """Drops the buffers and returns their memory: the device's, and the pinned host blocks where this torch
        can; what happened, in words, for the record."""
        torch = self.torch
        torch.cuda.synchronize(self.device)
        self.kinds.clear()
        self.pinned = self.dev = self.mem = []
        torch.cuda.empty_cache()
        host_empty = getattr(torch._C, "_host_emptyCache", None)
        if host_empty is None:
            return (f"pinned buffers kept in torch {torch.__version__}'s host cache (it has no "
                    "torch._C._host_emptyCache)")
        host_empty()
        return "pinned buffers freed (torch._C._host_emptyCache)"
