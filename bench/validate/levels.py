"""bench validate's levels: how much each checks (the workloads, their sizes, each launch's time) and which checks
it runs (the registry's, bench.validate.checks). bench.validate.config re-exports them."""

from __future__ import annotations

from dataclasses import dataclass

from bench.validate import checks as registry


@dataclass(frozen=True, kw_only=True, slots=True)
class Level:
    """How much one level checks: the workloads, their sizes and the time each launch may take."""

    model: str               # the per-GPU runs' and the data-parallel run's model preset
    micro_batch: int         # their micro batch per GPU
    steps: int               # steps of a per-GPU run (the first timing_warmup untimed)
    timing_warmup: int
    synthetic_size: int      # images in the synthetic data set
    dp_steps: int            # steps of the data-parallel run
    fallback_size: int       # bytes of an all-reduce, when no per-GPU run said how large the gradient is
    iters: int               # timed iterations per size: the median of these is a row's time
    comm_warmup: int
    timeout: float           # seconds one launch may take
    pairs: str               # inter-node pairs: "ring" (each node with its two neighbours) or "all" (round-robin;
                             # past pairing.ALL_PAIRS_MAX nodes the ring and `matchings` random perfect matchings)
    numerics_model: str
    numerics_steps: int
    matmul_n_gpu: int        # the timed matmul on a GPU (a CPU core gets 1024): large enough to reach the peak
    # On GPUs the per-GPU and data-parallel runs train this instead of model/micro_batch: a step the GPU bounds,
    # tens of milliseconds at fp32 even on the fastest GPU of bench/data/gpu_specs.json (docs/metrics.md, "The
    # per-GPU workload on GPUs"), where the micro model's is microseconds of kernels and the figure the host's.
    cuda_model: str
    cuda_img_size: int
    cuda_micro_batch: int
    checks: tuple[str, ...]  # what --checks may name at this level (bench.validate.checks.of_level)
    matchings: int = 4       # with pairs="all" past pairing.ALL_PAIRS_MAX nodes: random matchings after the ring
    pair_looks: int = 1      # passes over the pair rounds in the first launch (x --repeats): a node is judged by the
                             # share of its looks that fell short, which needs looks to mean something (full: see
                             # docs/validate.md, "Intermittent links", for the simulation that chose it)
    across_looks: int | None = None  # of those passes, how many look at the pairs across leaf switches (None: all;
                                     # the fabric's parts meet many pairs: docs/validate.md, "What the looks cost")
    again_looks: int | None = None   # passes of the second look (x --repeats; None: pair_looks): a node in doubt is
                                     # judged by these alone, so they carry what the first launch's few cannot
    burn_s: float = 0.0      # the burn's seconds without --burn (0: off): every GPU of a node hot at once
    repeats: int = 1         # per-GPU rounds without --repeats where the first names a GPU or a node (second looks)
    repeats_why: str = ""    # why that many: what the plan says beside it (benchmarks/fleet_replay.py measured it)


LEVELS = {
    # The smallest preset on synthetic data; messages of its gradient's size (1.8 MB).
    "quick": Level(model="vit-micro-p4-32", micro_batch=16, steps=24, timing_warmup=4, synthetic_size=1024,
                   dp_steps=30, fallback_size=1 << 20, iters=20, comm_warmup=5, timeout=240.0, pairs="ring",
                   numerics_model="vit-micro-p4-32", numerics_steps=8, matmul_n_gpu=8192,
                   cuda_model="vit-b16-224", cuda_img_size=224, cuda_micro_batch=32,
                   checks=registry.of_level("quick"),
                   repeats_why="one round names a whole-node straggler (a WARN: held, not drained) and FAILs one "
                               "past the noise; a second round only where a GPU would cost the job past the "
                               "straggler line (benchmarks/fleet_replay.py)"),
    # The study's model and batch; messages of ViT-B/16's gradient (344 MB in fp32); every pair of nodes.
    "full": Level(model="vit-b16-224", micro_batch=64, steps=50, timing_warmup=10, synthetic_size=10000,
                  dp_steps=60, fallback_size=64 << 20, iters=20, comm_warmup=5, timeout=900.0, pairs="all",
                  numerics_model="vit-tiny-p4-32", numerics_steps=20, matmul_n_gpu=8192,
                  cuda_model="vit-b16-224", cuda_img_size=224, cuda_micro_batch=64, burn_s=180.0,
                  pair_looks=2, across_looks=1, again_looks=4,
                  checks=registry.of_level("full"), repeats=3,
                  repeats_why="Frontera's whole-node stragglers run at 0.90-0.93 of the median in a first run, a "
                              "WARN; the median of 3 rounds (0.87-0.89) FAILs and drains all three; Longhorn's, which "
                              "the faster of the first two FAILs and the median of 3 passes, are held; 1.7 healthy GPUs "
                              "per 1,000 flagged (benchmarks/fleet_replay.py)"),
    # This node only, in seconds: inventory and the gate, the numerics job and matmul, the node's all-reduce.
    "prolog": Level(model="vit-micro-p4-32", micro_batch=16, steps=0, timing_warmup=0, synthetic_size=256,
                    dp_steps=0, fallback_size=1 << 20, iters=10, comm_warmup=3, timeout=120.0, pairs="ring",
                    numerics_model="vit-micro-p4-32", numerics_steps=8, matmul_n_gpu=8192,
                    cuda_model="vit-b16-224", cuda_img_size=224, cuda_micro_batch=32,
                    checks=registry.of_level("prolog")),
    # The health check alone: counters, kernel log, ports; no rank starts, no GPU time (beside running jobs).
    "health": Level(model="vit-micro-p4-32", micro_batch=16, steps=0, timing_warmup=0, synthetic_size=256,
                    dp_steps=0, fallback_size=1 << 20, iters=0, comm_warmup=0, timeout=60.0, pairs="ring",
                    numerics_model="vit-micro-p4-32", numerics_steps=0, matmul_n_gpu=0, cuda_model="vit-b16-224",
                    cuda_img_size=224, cuda_micro_batch=32, checks=registry.of_level("health")),
}
# Levels that check this node alone when no --hostfile (or --launcher inside an allocation) names others.
THIS_NODE = ("prolog", "health")
