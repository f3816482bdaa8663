"""The launches checks share, declared once: a check rides one of these (or opens its own), and a check that
measures in another's launch names the phase that does it; the launch's owner counts its riders in the plan.

    PER_GPU   every GPU alone, all at once (throughput's): the numerics job first, the copies, the burn after
    LINKS     each node's all-reduce, then the rounds of node pairs (intra-node's, else inter-node's)

Every --soak round opens these two again (soak=True): the checks that ride them are the round's (bench.validate.soak).
"""

from __future__ import annotations

from typing import Any

from bench.validate.checks.base import Launch, Phase

HEAD = Launch(name="head", words="none: bench on the head reaches every node at once (ssh, srun or mpirun)")
INVENTORY = Launch(name="inventory", words="none: read by the inventory's own process on each node")
PER_GPU = Launch(name="per-gpu", words="the per-GPU launch (throughput's)", soak=True)
LINKS = Launch(name="links", words="the link launch (intra-node's, else inter-node's)", soak=True)
OWN = Launch(name="own", words="its own")
NONE = Launch(name="none", words="none: judged from what was measured")

# The copies' sizes (MiB) and timed copies: a GPU's host link and memory need hundreds of MiB to reach their rate
# (nvbandwidth copies 512 MiB); a CPU rank's memcpy only needs to be past its caches, in well under a second.
COPY_SIZES = {"cuda": {"host_mb": 256, "memory_mb": 1024, "iters": 10},
              "cpu": {"host_mb": 32, "memory_mb": 64, "iters": 3}}
LOCK_STEM = "/tmp/vitbench-copies"   # + the run id and the machine's boot id: node-local, never the shared --out


def _copies_spec(cfg: Any, device: str) -> dict[str, Any]:
    return {**COPY_SIZES[device], "lock": LOCK_STEM}


def _burn_spec(cfg: Any, device: str) -> dict[str, Any] | None:
    return {"seconds": cfg.burn_s(), "interval_s": 1.0} if cfg.burn_s() > 0 else None


def _burn_words(p: Any) -> str:
    s = p.cfg.burn_s()
    return f", then every GPU hot at once for {s:.0f} s" if s else ""


# The numerics job run first by the per-GPU launch's ranks (bench.jobs.numerics.first: not a phase of the ranks').
NUMERICS_FIRST = Phase(name="numerics", launch=PER_GPU, spec=None, cost=lambda p: p.lv.numerics_steps * 0.1,
                       words=lambda p: ", the numerics job first")
# Each GPU of a node in turn, then all at once: about a second each on a GPU (bench.worker.copies).
COPIES = Phase(name="copies", launch=PER_GPU, spec=_copies_spec, cost=lambda p: p.gpus_per_node + 1,
               words=lambda p: ", copies")
BURN = Phase(name="burn", launch=PER_GPU, spec=_burn_spec, cost=lambda p: p.cfg.burn_s(), words=_burn_words)


def links_launch(p: Any, owner: str) -> None:
    """The link launch in the plan, opened by `owner` (intra-node, else inter-node): each node's own GPUs, then the
    level's first rounds of node pairs over its passes (pair_looks x --repeats; the pairs across leaves in
    across_looks of them: p.schedule) and the whole set."""
    intra, inter = p.wanted("intra-node"), p.wanted("inter-node")
    looks = p.lv.pair_looks * p.cfg.repeats  # the first launch's looks at each pair (bench.validate.pairs)
    across = p.lv.across_looks and p.lv.across_looks * p.cfg.repeats
    n = len(p.schedule)
    n_rounds = (1 if intra else 0) + (n + (p.nodes > 2) if inter else 0)
    times = f" {looks} times" if looks > 1 else ""
    if across is not None and across < looks and n < len(p.rounds) * looks:
        times += f" (those across leaf switches {across} time{'s' * (across > 1)}: {n} rounds)"
    p.launch(owner, p.intra_s * intra + (p.pair_s * n + p.whole_s) * inter,
             f"all-reduce of {p.size} B: each node's own GPUs" * intra + (", then " if intra and inter else "")
             + (f"{len(p.rounds)} round(s) of node pairs{times} and the whole set" if inter else ""),
             looks=2, rounds=n_rounds)
