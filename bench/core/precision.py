"""The training precisions bench knows, in one list, and what a CPU rank cannot do.

    from bench.core.precision import PRECISIONS, cpu_refusal
    cpu_refusal("fp16")   # the one line bench says before refusing fp16 on CPU

Which GPUs support which precision is bench.core.gpus.supports (compute
capability); this module only names them.
"""

from __future__ import annotations

PRECISIONS = ("fp32", "fp16", "bf16")


def cpu_refusal(precision: str) -> str | None:
    """Why `precision` cannot train on CPU ranks, or None when it can."""
    if precision == "fp16":
        return "DeepSpeed's CPU accelerator has no fp16 training; use bf16 or fp32 on CPU"
    return None
