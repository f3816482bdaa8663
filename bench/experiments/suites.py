"""Sweep suites: (base config, options, resources) -> the points to run. Pure.

    pool = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cpu")
    plan("strong", RunConfig(micro_batch=64), SuiteOptions(), pool)
    # -> strong/fixed-global/gpus=1 (micro 128), strong/fixed-global/gpus=2 (micro 64),
    #    strong/study/gpus=1 (micro 64), strong/study/gpus=2 (micro 64)

A point is a full RunConfig plus the resources it runs on, with an id that
stays the same from one invocation to the next ("batch/mb=64/gpus=2"), so a
sweep can be resumed by id. On a hostfile pool a point names its slots with
an --include spec; on this node it sets --gpus.

Suites (the study is arXiv 2602.21081, see bench/paper.py):
  batch      micro batch x GPU counts (default 16..256 at 1 and N GPUs)
  accum      gradient accumulation steps at a fixed micro batch
  strong     GPU counts 1, 2, 4 ... N in two senses: fixed-global (global
             batch fixed, micro = global / N: the textbook one) and study
             (fixed per-GPU batch over the whole data set: the study's)
  weak       the study's: data share base x N, so steps per epoch stay fixed
  placement  one GPU alone, then the same GPU count packed on one node vs one per node
  zero       ZeRO 0/1/2/3, 2+offload (3+nvme with --nvme-path) and FSDP2 by precision
  ddp        DeepSpeed ZeRO-0 vs plain PyTorch DDP vs FSDP2 at the same GPU counts
  paper      the study's recipe: ViT-B/16 at 224, AdamW 1e-4, 5 epochs,
             batch 16 and 64, at the study's GPU counts that the pool has
  memory     one point per strategy (DDP, ZeRO 0-3, offload, NVMe, FSDP2,
             pipeline) and, with --find-max-batch, the largest micro batch
             each fits (bench.experiments.memory)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from bench.analysis import paper
from bench.cluster.hostfile import include_spec
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.core.precision import PRECISIONS, cpu_refusal
from bench.experiments import memory
from bench.experiments.suite_options import SENSES, SuiteOptions
from bench.experiments.pool import Pool, gpu_counts, one_node, packed, powers_of_two, spread
from bench.launch.registry import MULTI_HOST_DEFAULT

SUITES = ("batch", "accum", "strong", "weak", "placement", "zero", "ddp", "paper", "memory")
ZERO_VARIANTS = ("0", "1", "2", "3", "1+offload", "2+offload", "3+offload", "3+nvme", "fsdp2", "fsdp2-keep")


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    id: str
    suite: str
    config: RunConfig
    resources: dict[str, list[int]]
    include: str | None = None
    """--include spec on a hostfile pool; None on this node (config.gpus is set)."""
    labels: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return sum(len(s) for s in self.resources.values())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "suite": self.suite, "gpus": self.gpus, "labels": self.labels,
                "resources": self.resources, "include": self.include, "config": self.config.to_dict()}


def make_point(suite: str, pid: str, cfg: RunConfig, pool: Pool, res: dict[str, list[int]],
               labels: dict[str, Any]) -> Point:
    """The point that runs cfg on the slots res: an --include spec on a hostfile pool, --gpus on this node."""
    n = sum(len(s) for s in res.values())
    if pool.hostfile:
        if cfg.launcher is None and len(pool.resources) > 1:
            # `bench run` launches a one-host selection locally, on this machine; a
            # point of a cluster sweep must run on the node it names.
            cfg = cfg.replace(launcher=MULTI_HOST_DEFAULT)
        return Point(id=pid, suite=suite, config=cfg.replace(gpus=None), resources=res,
                     include=include_spec(res), labels={**labels, "gpus": n})
    return Point(id=pid, suite=suite, config=cfg.replace(gpus=n), resources=res, labels={**labels, "gpus": n})


# --- option parsing ------------------------------------------------------------

def _ints(values: tuple[str, ...], option: str) -> list[int]:
    out = []
    for v in values:
        if not v.isdigit() or int(v) < 1:
            raise BadInput(f"{option}: {v!r} is not a whole number >= 1")
        out.append(int(v))
    return out


# --- suites --------------------------------------------------------------------

def _batch(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    mbs = _ints(opts.values, "--micro-batches") if opts.values else [16, 32, 64, 128, 256]
    counts = gpu_counts(opts.gpu_counts, pool, sorted({1, pool.total}))
    return [make_point("batch", f"batch/mb={mb}/gpus={n}", base.replace(micro_batch=mb), pool, packed(pool, n),
                   {"micro_batch": mb})
            for n in counts for mb in mbs]


def _accum(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    accs = _ints(opts.values, "--grad-accums") if opts.values else [1, 2, 4, 8]
    counts = gpu_counts(opts.gpu_counts, pool, [pool.total])
    return [make_point("accum", f"accum/accum={a}/gpus={n}", base.replace(grad_accum=a), pool, packed(pool, n),
                   {"grad_accum": a, "micro_batch": base.micro_batch})
            for n in counts for a in accs]


def _strong(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    counts = gpu_counts(opts.gpu_counts, pool, powers_of_two(pool.total))
    for s in opts.senses:
        if s not in SENSES:
            raise BadInput(f"--senses: unknown sense {s!r} (known: {', '.join(SENSES)})")
    points = []
    if "fixed-global" in opts.senses:
        g = opts.global_batch or base.micro_batch * max(counts)
        for n in counts:
            if g % n:
                raise BadInput(f"--global-batch: {g} does not split evenly over {n} GPUs")
            points.append(make_point("strong", f"strong/fixed-global/gpus={n}", base.replace(micro_batch=g // n), pool,
                                 packed(pool, n), {"sense": "fixed-global", "micro_batch": g // n, "global_batch": g}))
    if "study" in opts.senses:
        for n in counts:
            points.append(make_point("strong", f"strong/study/gpus={n}", base, pool, packed(pool, n),
                                 {"sense": "study", "micro_batch": base.micro_batch}))
    return points


def _weak(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    counts = gpu_counts(opts.gpu_counts, pool, powers_of_two(pool.total))
    top = max(counts)
    f0 = opts.base_fraction if opts.base_fraction is not None else min(paper.WEAK.share_per_gpu, 1.0 / top)
    if not 0 < f0 * top <= 1.0 + 1e-9:
        raise BadInput(f"--base-fraction: {f0} x {top} GPUs = {f0 * top:g} is not a share of the data set in (0, 1]")
    return [make_point("weak", f"weak/gpus={n}", base.replace(dataset_fraction=min(round(f0 * n, 10), 1.0)), pool,
                   packed(pool, n), {"sense": "study", "base_fraction": f0, "dataset_fraction": min(f0 * n, 1.0)})
            for n in counts]


def _placement(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    hosts = len(pool.resources)
    if not pool.hostfile or hosts < 2:
        raise BadInput(f"placement: needs a --hostfile that selects >= 2 hosts (this pool has {hosts})")
    widest = max(len(s) for s in pool.resources.values())
    default = min(hosts, widest)
    if default < 2 and not opts.gpu_counts:
        raise BadInput("placement: no host has >= 2 slots, so nothing can be packed on one node")
    counts = gpu_counts(opts.gpu_counts, pool, [default])
    # One GPU alone: the T1 that each placement's efficiency X_N / (N X_1) is measured against.
    points = [make_point("placement", "placement/one/gpus=1", base, pool, one_node(pool, 1), {"placement": "one"})]
    for n in counts:
        if n < 2:
            raise BadInput(f"--gpu-counts: placement needs >= 2 GPUs per point, got {n}")
        points.append(make_point("placement", f"placement/packed/gpus={n}", base, pool, one_node(pool, n),
                             {"placement": "packed"}))
        points.append(make_point("placement", f"placement/spread/gpus={n}", base, pool, spread(pool, n),
                             {"placement": "spread"}))
    return points


def _zero(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    # bench tune's and the memory suite's spelling (zero2+offload) names the same variant as 2+offload.
    variants = [v[4:] if v.startswith("zero") else v for v in opts.values] if opts.values else [
        "0", "1", "2", "3", "2+offload"] + (["3+nvme"] if base.nvme_path else []) + ["fsdp2"]
    for v in variants:
        if v not in ZERO_VARIANTS:
            raise BadInput(f"--strategies: unknown ZeRO variant {v!r} (known: {', '.join(ZERO_VARIANTS)})")
    default_prec = ["fp32", "fp16", "bf16"] if pool.device == "cuda" else ["fp32", "bf16"]
    precs = list(opts.precisions) if opts.precisions else default_prec
    for p in precs:
        if p not in PRECISIONS:
            raise BadInput(f"--precisions: unknown precision {p!r} (known: {', '.join(PRECISIONS)})")
        if pool.device != "cuda" and cpu_refusal(p):
            raise BadInput(f"--precisions: {p} needs a GPU ({cpu_refusal(p)})")
    counts = gpu_counts(opts.gpu_counts, pool, [pool.total])
    points = []
    for n in counts:
        for p in precs:
            for v in variants:
                if v.startswith("fsdp2"):  # the third arm: PyTorch's own sharding beside ZeRO's
                    if p == "fp16" and not opts.values:
                        continue  # FSDP2 runs fp32 and bf16 here
                    cfg = base.replace(engine="fsdp2", reshard_after_forward=v == "fsdp2", precision=p)
                    points.append(make_point("zero", f"zero/{v}/{p}/gpus={n}", cfg, pool, packed(pool, n),
                                             {"engine": "fsdp2", "reshard_after_forward": v == "fsdp2",
                                              "precision": p}))
                    continue
                stage, offload = int(v[0]), ("cpu" if v.endswith("+offload") else "nvme" if v.endswith("+nvme")
                                             else None)
                if offload == "nvme" and not base.nvme_path:
                    raise BadInput("--strategies: 3+nvme needs --nvme-path DIR")
                cfg = base.replace(zero_stage=stage, offload=offload, precision=p)
                points.append(make_point("zero", f"zero/stage={v}/{p}/gpus={n}", cfg, pool, packed(pool, n),
                                         {"zero_stage": stage, "offload": offload, "precision": p}))
    return points


def _ddp(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    # DDP has no ZeRO and runs fp32 here; a like-for-like DeepSpeed twin must too.
    if base.zero_stage != 0 or base.offload or base.precision != "fp32":
        raise BadInput("ddp: compares fp32 ZeRO-0 runs; drop --zero-stage/--offload/--precision")
    counts = gpu_counts(opts.gpu_counts, pool, [pool.total])
    return [make_point("ddp", f"ddp/engine={e}/gpus={n}", base.replace(engine=e), pool, packed(pool, n), {"engine": e})
            for n in counts for e in ("deepspeed", "ddp", "fsdp2")]


def paper_config(base: RunConfig) -> RunConfig:
    """The study's recipe over the base config (data set, data dir, where and how stay the user's)."""
    m = paper.MODEL
    return base.replace(model="vit-b16-224", img_size=None, lr=m.lr, epochs=float(m.epochs), steps=None,
                        precision=m.precision, zero_stage=0, offload=None, schedule="constant", warmup_steps=0,
                        grad_accum=1, dataset_fraction=1.0, engine="deepspeed")


def _paper(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    cfg0 = paper_config(base)
    mbs = _ints(opts.values, "--micro-batches") if opts.values else [16, 64]
    study_counts = sorted(set(paper.VECTOR_INTRA.gpus) | set(paper.VECTOR_INTER.gpus) | set(paper.BATCH_SWEEP.gpus))
    counts = gpu_counts(opts.gpu_counts, pool, [n for n in study_counts if n <= pool.total])
    points = []
    for mb in mbs:
        cfg = cfg0.replace(micro_batch=mb)
        for n in counts:
            points.append(make_point("paper", f"paper/mb={mb}/gpus={n}", cfg, pool, packed(pool, n),
                                 {"sense": "study", "placement": "packed", "micro_batch": mb}))
        # The study's inter-node series ran one GPU per node.
        if pool.hostfile and len(pool.resources) >= 2:
            for n in counts:
                if 2 <= n <= len(pool.resources) and n in paper.VECTOR_INTER.gpus:
                    points.append(make_point("paper", f"paper/spread/mb={mb}/gpus={n}", cfg, pool, spread(pool, n),
                                         {"sense": "study", "placement": "spread", "micro_batch": mb}))
    return points


def _memory(base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    counts = gpu_counts(opts.gpu_counts, pool, [pool.total])
    return memory.plan(base, opts, pool, _maker("memory", pool), counts)


def _maker(suite: str, pool: Pool) -> Callable:
    return lambda pid, cfg, n, labels: make_point(suite, pid, cfg, pool, packed(pool, n), labels)


def follow_ups(point: Point, latest: dict[str, dict[str, Any]], opts: SuiteOptions, pool: Pool) -> list[Point]:
    """Points a finished point asks for next (memory --find-max-batch's search); [] for every other suite."""
    if point.suite != "memory" or not opts.find_max_batch:
        return []
    return memory.follow_ups(point, latest, _maker("memory", pool), opts.max_micro_batch)


_SUITES = {"batch": _batch, "accum": _accum, "strong": _strong, "weak": _weak, "placement": _placement,
           "zero": _zero, "ddp": _ddp, "paper": _paper, "memory": _memory}


def plan(suite: str, base: RunConfig, opts: SuiteOptions, pool: Pool) -> list[Point]:
    """The points of a suite, in run order; BadInput names the option that makes it impossible."""
    if suite not in _SUITES:
        raise BadInput(f"sweep: unknown suite {suite!r} (known: {', '.join(SUITES)})")
    if pool.total < 1:
        raise BadInput("sweep: the pool has no GPUs/ranks")
    if opts.find_max_batch and suite != "memory":
        raise BadInput(f"--find-max-batch: only the memory suite searches for the largest batch, not {suite}")
    if opts.max_micro_batch < 1:
        raise BadInput(f"--max-micro-batch: must be >= 1, got {opts.max_micro_batch}")
    points = _SUITES[suite](base, opts.for_suite(suite), pool)
    ids = [p.id for p in points]
    assert len(ids) == len(set(ids)), ids
    return points
