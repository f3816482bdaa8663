"""Name what holds a synchronous data-parallel cluster back: a GPU, a node or a link.

    from bench.analysis.stragglers import find
    for s in find(rank_compute_s={("node1", 0): 0.11, ("node2", 0): 0.30},
                  node_step_s={"node1": 0.10, "node2": 0.31},
                  node_busbw={"node1": 9e8, "node2": 1e5}, grad_bytes=1.2e6, n=2):
        print(s.kind, s.host, f"{s.cost:.0%}", "--exclude", s.exclude)

Every step waits for the slowest rank, so one slow part costs the whole
cluster: cost = metrics.straggler_cost (1 - median / max of per-rank step
times; METRICS.md). Three views, each from its own measurement:
  gpu   a rank's own compute per step in the data-parallel run (forward +
        backward - the all-reduce DeepSpeed timed): waiting is left out,
        which a wall-clock step would hide (every rank's equals the slowest's)
  node  each node's solo step time (one rank, nothing to wait for)
  link  each node's modelled step: the median solo step plus one all-reduce
        of the gradients at that node's best pairwise bus bandwidth
        (metrics.allreduce_seconds): what its link alone would cost
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench.analysis import metrics

KINDS = ("gpu", "node", "link")


@dataclass(frozen=True, slots=True)
class Straggler:
    kind: str            # gpu, node or link
    host: str
    slot: int | None     # the GPU (rank slot) for kind gpu
    cost: float          # share of the cluster's throughput it takes (metrics.straggler_cost)
    value_s: float       # its time per step (measured, or modelled for a link)
    median_s: float      # the median over the cluster of the same figure
    exclude: str         # the --exclude value that drops it
    reason: str
    compared: int = 0            # how many ranks or nodes the median and the cost are over
    steps: int | None = None     # how many steps each compared figure is the mean of (None: not given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(xs) -> float:
    return metrics.percentile(list(xs), 50)


def _over(n: int, what: str, steps: int | None) -> str:
    """What a straggler's figures come from: '(3 ranks compared, each the mean of 20 steps)'."""
    return f" ({n} {what} compared" + (f", each the mean of {steps} step(s))" if steps else ")")


def from_ranks(rank_compute_s: dict[tuple[str, int], float], steps: int | None = None) -> Straggler | None:
    """The slowest rank of a data-parallel run, from each rank's own compute time per step (`steps` each)."""
    if len(rank_compute_s) < 2:
        return None
    host, slot = metrics.slowest_rank(rank_compute_s)
    t, med = rank_compute_s[(host, slot)], _median(rank_compute_s.values())
    cost = metrics.straggler_cost(rank_compute_s)
    n = len(rank_compute_s)
    return Straggler("gpu", host, slot, cost, t, med, f"{host}:{slot}",
                     f"GPU {slot} on {host} computes a step in {t * 1e3:.1f} ms, the median rank in {med * 1e3:.1f} ms"
                     + _over(n, "ranks", steps), n, steps)


def from_nodes(node_step_s: dict[str, float], steps: int | None = None) -> Straggler | None:
    """The slowest node, from each node's solo (single-rank) step time (`steps` each)."""
    if len(node_step_s) < 2:
        return None
    host = metrics.slowest_rank(node_step_s)
    t, med = node_step_s[host], _median(node_step_s.values())
    n = len(node_step_s)
    return Straggler("node", host, None, metrics.straggler_cost(node_step_s), t, med, host,
                     f"{host} alone takes {t * 1e3:.1f} ms a step, the median node {med * 1e3:.1f} ms"
                     + _over(n, "nodes", steps), n, steps)


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


def find(*, rank_compute_s: dict[tuple[str, int], float] | None = None, node_step_s: dict[str, float] | None = None,
         node_busbw: dict[str, float] | None = None, grad_bytes: float = 0.0, n: int = 0,
         rank_steps: int | None = None, node_steps: int | None = None) -> list[Straggler]:
    """Every view's slowest part, costliest first (views without data are left out).

    rank_steps, node_steps: how many steps each rank's and each node's figure is the mean of, which
    each straggler then says (`steps`, and its reason), beside how many it was compared with.
    """
    found = [from_ranks(rank_compute_s or {}, rank_steps), from_nodes(node_step_s or {}, node_steps)]
    if node_step_s and node_busbw:
        found.append(from_links(node_busbw, grad_bytes, _median(node_step_s.values()), n))
    return sorted((s for s in found if s is not None), key=lambda s: -s.cost)
