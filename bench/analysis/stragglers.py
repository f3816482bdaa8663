"""Name what holds a synchronous data-parallel cluster back: a GPU, a node or a link.

    from bench.analysis.stragglers import find
    for s in find(gpu_step_s={("node1", 0): 0.10, ("node2", 0): 0.31},
                  rank_compute_s={("node1", 0): 0.11, ("node2", 0): 0.30},
                  node_busbw={"node1": 9e8, "node2": 1e5}, grad_bytes=1.2e6, n=2):
        print(s.kind, s.host, f"{s.cost:.0%}", "--exclude", s.exclude)

Every step waits for the slowest rank, so one slow part costs the whole
cluster: cost = metrics.straggler_cost (1 - median / max of per-rank step
times; docs/metrics.md). Three views, each from its own measurement:
  gpu   each GPU's step time alone (bench validate's per-GPU runs: every GPU
        at once, one rank each, nothing to wait for)
  rank  a rank's own work per step in the data-parallel run (its step minus
        its time with a collective in flight): waiting is left out, which a
        wall-clock step would hide (every rank's equals the slowest's); only
        where that time is measured (not on CUDA: bench.validate.training)
  link  each node's modelled step: the median GPU step plus one all-reduce
        of the gradients at that node's best pairwise bus bandwidth
        (metrics.allreduce_seconds): what its link alone would cost
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench.analysis import metrics

KINDS = ("gpu", "rank", "link")


@dataclass(frozen=True, slots=True)
class Straggler:
    kind: str            # gpu, rank or link
    host: str
    slot: int | None     # the GPU (slot) for kinds gpu and rank
    cost: float          # share of the cluster's throughput it takes (metrics.straggler_cost)
    value_s: float       # its time per step (measured, or modelled for a link)
    median_s: float      # the median over the cluster of the same figure
    exclude: str         # the --exclude value that drops it
    reason: str
    compared: int = 0            # how many GPUs, ranks or nodes the median and the cost are over
    steps: int | None = None     # how many steps each compared figure is the median or mean of (None: not given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(xs) -> float:
    return metrics.percentile(list(xs), 50)


def _over(n: int, what: str, steps: int | None) -> str:
    """What a straggler's figures come from: '(3 ranks compared, each of 20 steps)'."""
    return f" ({n} {what} compared" + (f", each of {steps} step(s))" if steps else ")")


def from_slots(kind: str, step_s: dict[tuple[str, int], float], steps: int | None = None) -> Straggler | None:
    """The slowest GPU of a view, from each (host, slot)'s time per step (`steps` each): alone (gpu) or its own
    work in the data-parallel run (rank)."""
    if len(step_s) < 2:
        return None
    host, slot = metrics.slowest_rank(step_s)
    t, med = step_s[(host, slot)], _median(step_s.values())
    how = "alone" if kind == "gpu" else "of its own work in the data-parallel run"
    n = len(step_s)
    return Straggler(kind, host, slot, metrics.straggler_cost(step_s), t, med, f"{host}:{slot}",
                     f"GPU {slot} on {host} takes {t * 1e3:.1f} ms a step {how}, the median GPU {med * 1e3:.1f} ms"
                     + _over(n, "GPUs" if kind == "gpu" else "ranks", steps), n, steps)


def from_links(node_busbw: dict[str, float], grad_bytes: float, t_compute_s: float, n: int) -> Straggler | None:
    """The node whose best link makes the gradient all-reduce longest, in modelled step time."""
    if len(node_busbw) < 2 or n < 2 or not grad_bytes > 0 or not t_compute_s > 0:
        return None
    modelled = {h: t_compute_s + metrics.allreduce_seconds(grad_bytes, bw, n) for h, bw in node_busbw.items() if bw > 0}
    if len(modelled) < 2:
        return None
    host = metrics.slowest_rank(modelled)
    med_bw = _median(node_busbw.values())
    return Straggler("link", host, None, metrics.straggler_cost(modelled), modelled[host], _median(modelled.values()),
                     host, f"{host}'s best link reaches {node_busbw[host] / 1e6:.3g} MB/s bus bandwidth, the median "
                     f"node's {med_bw / 1e6:.3g} MB/s: an all-reduce of {grad_bytes / 1e6:.3g} MB of gradients "
                     f"would take {metrics.allreduce_seconds(grad_bytes, node_busbw[host], n) * 1e3:.1f} ms a step"
                     + _over(len(modelled), "nodes", None), len(modelled))


def find(*, gpu_step_s: dict[tuple[str, int], float] | None = None,
         rank_compute_s: dict[tuple[str, int], float] | None = None, node_busbw: dict[str, float] | None = None,
         grad_bytes: float = 0.0, n: int = 0, gpu_steps: int | None = None,
         rank_steps: int | None = None) -> list[Straggler]:
    """Every view's slowest part, costliest first (views without data are left out).

    gpu_steps, rank_steps: how many steps each GPU's and each rank's figure comes from, which each straggler
    then says (`steps`, and its reason), beside how many it was compared with.
    """
    found = [from_slots("gpu", gpu_step_s or {}, gpu_steps), from_slots("rank", rank_compute_s or {}, rank_steps)]
    if gpu_step_s and node_busbw:
        found.append(from_links(node_busbw, grad_bytes, _median(gpu_step_s.values()), n))
    return sorted((s for s in found if s is not None), key=lambda s: -s.cost)
