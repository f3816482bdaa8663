"""bench tune's search, pure: the options, the space, pruning by predicted memory, bisection, halving's budget.

    space = Space.build(base_cfg, TuneOptions(), pool)          # strategies x GPU counts x micro batch x accumulation
    next_probe([8, 16, 32, 64], {64: "oom"}, hint=32)            # -> 32: the micro batch to try next, None when settled
    finals_repeats(remaining=5, finalists=2, repeats=3)          # -> 2: repeats that fit the budget

A candidate is one (strategy, GPU count, micro batch, accumulation); a trial
is one run of a candidate at some number of steps. bench.experiments.tune
runs the trials; this module decides which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.core.options import csv_parser, opt, strategies
from bench.core.parallel import model_divides, tensor_parallel_of
from bench.experiments.pool import Pool, powers_of_two

STRATEGIES = ("ddp", "fsdp2", "zero0", "zero1", "zero2", "zero3", "zero1+offload", "zero2+offload", "zero3+offload")
# and tensor parallelism over any of TP_BASES: fsdp2+tp2, zero1+tp4, ... (bench.core.parallel.tensor_parallel_of)
TP_DEFAULT = (2, 4)
DEFAULT_LADDER = (8, 16, 32, 64, 128, 256, 512, 1024)
DEFAULT_BUDGET_RUNS = 20


def _csv(kind: type):
    return csv_parser(kind, dedupe=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneOptions:
    """bench tune's own options; None means the default for the device."""

    strategies: tuple[str, ...] | None = opt(
        "strategies to search: " + ", ".join(STRATEGIES) + ", and <fsdp2|zero0-3>+tp<T> (tensor parallelism) "
        "(default zero0-zero3, plus zero2+offload and fsdp2+tp2/tp4 where the model divides, on GPUs)",
        default=None, parse=strategies, metavar="LIST", group="tune")
    gpu_counts: tuple[int, ...] | None = opt("GPU (rank) counts to search (default 1, 2, 4 ... up to the pool)",
                                             default=None, parse=_csv(int), metavar="LIST", group="tune")
    micro_batches: tuple[int, ...] | None = opt(
        "micro batches the bisection may pick from (default " + ",".join(map(str, DEFAULT_LADDER)) + ")",
        default=None, parse=_csv(int), metavar="LIST", group="tune")
    grad_accums: tuple[int, ...] | None = opt("gradient accumulation steps to search (default 1; not with "
                                              "--global-batch, which sets them)", default=None, parse=_csv(int),
                                              metavar="LIST", group="tune")
    global_batch: int | None = opt("fix micro batch x accumulation x ranks to N (the convergence constraint; default: not fixed)",
                                   default=None, metavar="N", group="tune")
    budget: int | None = opt(f"at most RUNS trials in all, resumed ones counted (default {DEFAULT_BUDGET_RUNS} "
                             "without --budget-minutes)", default=None, metavar="RUNS", group="tune")
    budget_minutes: float | None = opt("start no trial that would end past M minutes of trials", default=None,
                                       metavar="M", group="tune")
    trial_steps: int = opt("steps of the first, short trials; each halving doubles them", default=10,
                           metavar="N", group="tune")
    repeats: int = opt("runs of each finalist at the final length, for the run-to-run spread", default=3,
                       metavar="N", group="tune")

    def __post_init__(self) -> None:
        for s in self.strategies or ():
            if s not in STRATEGIES and tensor_parallel_of(s) is None:
                raise BadInput(f"--strategies: unknown strategy {s!r} (known: {', '.join(STRATEGIES)}, and "
                               "fsdp2+tp<T>, zero<k>+tp<T>)")
        if self.global_batch is not None and self.global_batch < 1:
            raise BadInput(f"--global-batch: must be >= 1, got {self.global_batch}")
        if self.global_batch is not None and self.grad_accums:
            raise BadInput("--grad-accums: not with --global-batch (it sets accumulation = global / (micro x ranks))")
        if self.budget is not None and self.budget < 1:
            raise BadInput(f"--budget: must be at least 1 run, got {self.budget}")
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise BadInput(f"--budget-minutes: must be > 0, got {self.budget_minutes}")
        if self.trial_steps < 2:
            raise BadInput(f"--trial-steps: must be at least 2, got {self.trial_steps}")
        if self.repeats < 1:
            raise BadInput(f"--repeats: must be at least 1, got {self.repeats}")

    @property
    def budget_runs(self) -> int | None:
        if self.budget is None and self.budget_minutes is None:
            return DEFAULT_BUDGET_RUNS
        return self.budget


def _offload(on: bool) -> object:
    """RunConfig's offload value: a bool in older configs, "cpu" / None where --offload also takes nvme."""
    return on if isinstance(RunConfig().offload, bool) else ("cpu" if on else None)


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    engine: str
    stage: int
    """ZeRO stage of the config (0 for ddp and fsdp2)."""
    offload: bool
    sharded: int
    """The ZeRO stage whose model states it holds per rank (fsdp2 shards all three: 3)."""
    tensor: int = 1
    """The tensor-parallel degree T (the +tp<T> strategies)."""

    @classmethod
    def of(cls, name: str) -> "Strategy":
        tp = tensor_parallel_of(name)
        if tp is not None:
            base = cls.of(tp[0])
            return cls(name, base.engine, base.stage, False, base.sharded, tp[1])
        if name in ("ddp", "fsdp2"):
            return cls(name, name, 0, False, 3 if name == "fsdp2" else 0)
        return cls(name, "deepspeed", int(name[4]), name.endswith("+offload"), int(name[4]))

    def apply(self, cfg: RunConfig) -> RunConfig:
        return cfg.replace(engine=self.engine, zero_stage=self.stage, offload=_offload(self.offload),
                           tensor_parallel=self.tensor)


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    strategy: str
    gpus: int
    micro_batch: int
    grad_accum: int

    @property
    def key(self) -> str:
        return f"{self.strategy}/gpus={self.gpus}/mb={self.micro_batch}/accum={self.grad_accum}"

    def trial_id(self, steps: int, repeat: int) -> str:
        return f"tune/{self.key}/steps={steps}/rep={repeat}"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "strategy": self.strategy, "gpus": self.gpus, "micro_batch": self.micro_batch,
                "grad_accum": self.grad_accum}


@dataclass(slots=True)
class Space:
    """What may be tried, and what was ruled out before anything ran (with the reason)."""

    strategies: list[str]
    counts: list[int]
    ladder: list[int]
    accums: list[int]
    global_batch: int | None
    pruned: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, base: RunConfig, opts: TuneOptions, pool: Pool) -> "Space":
        default = ["zero0", "zero1", "zero2", "zero3"] + (["zero2+offload"] if pool.device == "cuda" else [])
        if pool.device == "cuda":
            default += [f"fsdp2+tp{t}" for t in TP_DEFAULT if t <= max(len(s) for s in pool.resources.values())
                        and model_divides(base.model, base.img_size, t)]
        strategies = list(opts.strategies or default)
        counts = list(opts.gpu_counts or powers_of_two(pool.total))
        for n in counts:
            if n > pool.total:
                raise BadInput(f"--gpu-counts: {n} asked but the pool has {pool.total} GPU(s)/rank(s)")
        space = cls(strategies=strategies, counts=sorted(set(counts)), ladder=list(opts.micro_batches or DEFAULT_LADDER),
                    accums=list(opts.grad_accums or (1,)), global_batch=opts.global_batch)
        if pool.device != "cuda" and not opts.strategies:
            space.notes.append("offload not searched: on CPU nodes the optimizer's host memory is the memory "
                               "the ranks already use (--strategies zero2+offload adds it)")
            space.notes.append("tensor parallelism not searched on CPU nodes: it splits the work data parallelism "
                               "splits too and adds the activations' all-reduces (--strategies fsdp2+tp2 adds it)")
        for s in list(strategies):
            try:
                Strategy.of(s).apply(base)
            except BadInput as e:
                strategies.remove(s)
                space.pruned.append({"strategy": s, "candidate": None, "reason": f"refused by bench run: {e}"})
                continue
            if not space.counts_for(s):
                strategies.remove(s)
                space.pruned.append({"strategy": s, "candidate": None, "reason": f"T = {Strategy.of(s).tensor} "
                                     f"divides none of the GPU counts searched ({', '.join(map(str, space.counts))})"})
        if not strategies:
            raise BadInput("--strategies: none of them can run with these options (see the reasons in tune.json)")
        if opts.global_batch is not None and not any(space.pairs(n) for n in space.counts):
            raise BadInput(f"--global-batch: {opts.global_batch} is not micro x accumulation x ranks for any micro "
                           f"batch of --micro-batches at any of --gpu-counts")
        return space

    def counts_for(self, strategy: str) -> list[int]:
        """ZeRO on one rank partitions nothing: at one GPU only ZeRO-0 and DDP run. T must divide a TP
        strategy's ranks (an empty list: no count of the search can hold it)."""
        t = Strategy.of(strategy).tensor
        if t > 1:
            return [n for n in self.counts if n >= t and n % t == 0]
        return [n for n in self.counts if n > 1 or strategy in ("zero0", "ddp")] or [max(self.counts)]

    def pairs(self, n: int, tensor: int = 1) -> list[tuple[int, int]]:
        """(micro batch, accumulation) at n ranks, micro ascending; with --global-batch m x a x D = G, D = n / T
        data-parallel replicas (a tensor-parallel group trains one micro batch together)."""
        if self.global_batch is None:
            return [(m, a) for m in self.ladder for a in self.accums]
        g, n = self.global_batch, n // tensor
        return [(m, g // (m * n)) for m in self.ladder if g % (m * n) == 0]

    def prune(self, c: Candidate, reason: str) -> None:
        self.pruned.append({"strategy": c.strategy, "candidate": c.to_dict(), "reason": reason})


def next_probe(ladder: list[int], known: dict[int, str], hint: int | None = None) -> int | None:
    """The micro batch bisection tries next; None once the largest that fits is settled.

    known: micro batch -> "ok" | "oom" (run or inferred). Fitting is taken as
    monotone: everything below an ok fits, everything above an oom does not.
    The probe is the upper middle of the open interval, or `hint` (another
    strategy's ceiling) when it lies inside it.
    """
    lo = max((i for i, m in enumerate(ladder) if known.get(m) == "ok"), default=-1)
    hi = min((i for i, m in enumerate(ladder) if known.get(m) == "oom" and i > lo), default=len(ladder))
    if lo + 1 >= hi:
        return None
    if hint is not None and hint in ladder and lo < ladder.index(hint) < hi:
        return hint
    return ladder[(lo + hi + 1) // 2]


def ceiling(ladder: list[int], known: dict[int, str]) -> int | None:
    """The largest micro batch known to fit below the smallest known not to; None when none fits."""
    hi = min((m for m in ladder if known.get(m) == "oom"), default=None)
    oks = [m for m in ladder if known.get(m) == "ok" and (hi is None or m < hi)]
    return max(oks) if oks else None


def halve(k: int) -> int:
    """Successive halving keeps the better half (rounded up) of k candidates."""
    return max(1, math.ceil(k / 2))


def finals_repeats(remaining: int, finalists: int, repeats: int, have: int = 0) -> int:
    """How many runs per finalist fit in `remaining` trials (at least 2 for a spread, else 1), have already done."""
    for r in range(repeats, 0, -1):
        if finalists * max(r - have, 0) <= remaining:
            return r
    return have
