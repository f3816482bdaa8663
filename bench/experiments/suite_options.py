"""The options of bench sweep's suites (SuiteOptions): fields, parsers, help; None means the suite's default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bench.core.errors import BadInput
from bench.core.options import csv_parser, opt, strategies
from bench.experiments import memory

SENSES = ("fixed-global", "study")

_csv = csv_parser


# The option each suite sweeps, named as bench tune names the same lists; the others sweep no list of values.
AXIS = {"batch": "micro_batches", "paper": "micro_batches", "accum": "grad_accums", "zero": "strategies",
        "memory": "strategies"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteOptions:
    """The sweep's own options; None means the suite's default.

    `values` is the list the suite sweeps, whichever option gave it (AXIS; for_suite fills it): the
    suites read it alone.
    """

    micro_batches: tuple[str, ...] | None = opt(
        "batch, paper: the micro batches to sweep (default 16,32,64,128,256; paper: 16,64)", default=None,
        parse=_csv(str), metavar="LIST", group="sweep")
    grad_accums: tuple[str, ...] | None = opt("accum: the gradient accumulation steps to sweep (default 1,2,4,8)",
                                              default=None, parse=_csv(str), metavar="LIST", group="sweep")
    strategies: tuple[str, ...] | None = opt(
        "zero: zero0,zero1,zero2,zero3,zero1+offload,zero2+offload,zero3+offload,zero3+nvme,fsdp2,fsdp2-keep "
        "(as bench tune spells them; 2+offload is zero2+offload); memory: " + ",".join(memory.STRATEGIES)
        + ", fsdp2+tp<T>, zero<k>+tp<T> (default: the suite's)", default=None, parse=strategies, metavar="LIST",
        group="sweep")
    values: tuple[str, ...] | None = opt(
        "the swept values, whichever the suite sweeps", default=None, parse=_csv(str), metavar="LIST",
        group="sweep", replaced_by="--micro-batches (batch, paper), --grad-accums (accum) or --strategies "
        "(zero, memory)")
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

    def for_suite(self, suite: str) -> "SuiteOptions":
        """These options with `values` set from the option the suite sweeps; BadInput for a list it does not."""
        axis = AXIS.get(suite)
        for name in ("micro_batches", "grad_accums", "strategies"):
            if getattr(self, name) is not None and name != axis:
                sweeps = f"it sweeps {axis_option(suite)}" if axis else "it sweeps no list of values"
                raise BadInput(f"{axis_option(name)}: the {suite} suite does not take it ({sweeps})")
        given = getattr(self, axis) if axis else None
        return dataclasses.replace(self, values=given if given is not None else self.values)


def axis_option(suite_or_field: str) -> str:
    """The option a suite's list is given with (--micro-batches for batch), or a field's own option."""
    name = AXIS.get(suite_or_field, suite_or_field)
    return "--" + name.replace("_", "-")
