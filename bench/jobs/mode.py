"""How a caller runs one training job, beyond its config and hosts (bench.jobs.train.run's Mode).

    run(cfg, hosts)                                                   # bench run: Mode()
    run(cfg, hosts, Mode(quiet=True, out_dir="results/strong/runs"))  # a sweep's point
    run(cfg, hosts, Mode(quiet=True, inspected=(nodes, verdict), start_barrier=b, independent=True))  # validate

Apart from bench.jobs.train so that the sweep engine can name it without
importing the launch machinery (bench sweep --help stays quick).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True, slots=True, kw_only=True)
class Mode:
    """How a caller runs the job, beyond its config and hosts: bench run's is Mode()."""

    quiet: bool = False
    """No notes on stderr (--json, a sweep's points, validate's jobs)."""
    out_dir: str | None = None
    """The results root, where it is not cfg.out (a sweep's runs/)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields added to the record."""
    inspected: tuple[list[dict], dict] | None = None
    """(inventory, verdict) the caller already took (validate and tune probe once for all their runs):
    the hosts are not reached again."""
    on_progress: Callable[[dict[str, Any]], None] | None = None
    start_barrier: dict[str, Any] | None = None
    """{"dir", "count", "timeout_s"}: the ranks start their first step only once `count` runs have reached
    it (bench.worker.barrier), so runs launched together are measured together."""
    independent: bool = False
    """Every rank trains alone, in a world of one, with no communication (validate's per-GPU runs); the
    record's "alone" lists each rank's own figures (bench.jobs.alone)."""
    numerics: dict[str, Any] | None = None
    """plan.json's "numerics" (bench.jobs.numerics.first): every rank runs validate's numerics job first, its
    report in the record's "numerics" (one launch for the per-GPU checks)."""
    copies: dict[str, Any] | None = None
    """plan.json "copies" (bench.worker.copies): every rank copies to and from its host and within its memory
    after the numerics job, alone on its node and then all at once; the record's "copies"."""
    burn: dict[str, Any] | None = None
    """plan.json "burn" (bench.worker.burn): every rank trains on for a fixed time after its timed steps, all at
    once, its node's GPUs sampled; the record's "burn"."""
