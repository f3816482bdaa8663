"""The options of bench sweep's suites (SuiteOptions): fields, parsers, help; None means the suite's default."""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.options import csv_parser, opt
from bench.experiments import memory

SENSES = ("fixed-global", "study")

_csv = csv_parser


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteOptions:
    """The sweep's own options; None means the suite's default."""

    values: tuple[str, ...] | None = opt(
        "the swept values: micro batches (batch, paper), accumulation steps (accum), "
        "ZeRO variants 0,1,2,3,1+offload,2+offload,3+offload,3+nvme,fsdp2,fsdp2-keep (zero), strategies (memory: "
        + ",".join(memory.STRATEGIES) + ")", default=None, parse=_csv(str), metavar="LIST",
        group="sweep")
    gpu_counts: tuple[int, ...] | None = opt("GPU (rank) counts, e.g. 1,2,4; default: the suite's, up to the pool",
                                             default=None, parse=_csv(int), metavar="LIST", group="sweep")
    precisions: tuple[str, ...] | None = opt(
        "zero: precisions (default fp32,bf16 on CPU, fp32,fp16,bf16 on GPU)", default=None, parse=_csv(str),
        metavar="LIST", group="sweep")
    senses: tuple[str, ...] = opt("strong: fixed-global (textbook: global batch fixed), study (per-GPU batch fixed)",
                                  default=SENSES, parse=_csv(str), metavar="LIST", group="sweep")
    global_batch: int | None = opt("strong fixed-global: the global batch (default: micro batch x the largest count)",
                                   default=None, metavar="N", group="sweep")
    base_fraction: float | None = opt(
        "weak: data share per GPU (default the study's 0.10, or 1/N when that is smaller)", default=None,
        metavar="F", group="sweep")
    find_max_batch: bool = opt("memory: per strategy, search for the largest micro batch that fits (each OOM a "
                               "recorded point)", default=False, group="sweep")
    max_micro_batch: int = opt("memory --find-max-batch: the largest micro batch tried", default=1024,
                               metavar="N", group="sweep")
