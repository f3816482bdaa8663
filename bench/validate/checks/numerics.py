"""The numerics check: the same deterministic job on every GPU, bit for bit; the exact matmul."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check, Row


def _plan(p) -> None:
    if p.wanted("throughput"):
        p.none("numerics", "run first in the per-GPU launch")
    else:
        p.launch("numerics", p.lv.numerics_steps * 0.1,
                 f"{p.lv.numerics_model}, {p.lv.numerics_steps} steps on every GPU", rendezvous=False)


CHECK = Check(
    name="numerics",
    levels=("quick", "full", "prolog"),
    phase=launches.NUMERICS_FIRST,
    plan=_plan,
    action=("drain: the GPU computes different bits from its peers; reset it and validate again, replace it if it "
            "repeats"),
    what=('the same deterministic job on every GPU, every loss bit for bit, plus an exact integer matmul; run '
          "first by the per-GPU runs' ranks (at `prolog`, by the all-reduce's): one launch"),
    judged=('the GPUs of the same model and stack (the majority), and a reference curve of the stack'),
    rows=(Row(
        name="matmul",
        action=("drain: the GPU's matmul is slower than its peers; read its health rows (clocks, power), then "
                "validate again"),
        what=('a timed matmul per GPU (bf16/fp16 where the GPU has the units); a FAIL is timed again (the named GPUs\' '
              'nodes run the job once more, each GPU keeps its faster matmul: only slow in both FAILs)'),
        judged=('the best published figure, and lines derived from its peers')),),)
