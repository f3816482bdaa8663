"""One comm job: collective bandwidth between the ranks a run would use, with a correctness count.

    from bench.jobs.comm import CommConfig, run
    rec = run(CommConfig(op="all_gather", sizes="4K:64M", gpus=2), HostSelection())

Same planning and launcher as a training run (bench.jobs.plan, bench.launch;
module bench.worker.comm). Per size the record's rows carry the bytes S, the
time of one collective (min, median, max over the timed iterations; each
iteration's time is the slowest rank's), algbw and busbw as nccl-tests
defines them (bench.analysis.metrics; docs/metrics.md, "Collective benchmark"),
and #wrong: values that differ from the exactly known result
(bench.core.collectives). sizes is the per-rank buffer: the send buffer of
all_gather, the output of reduce_scatter. NCCL on GPUs, gloo on CPU.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from bench.analysis.comm_figures import TIMING, rows_from_summary
from bench.cluster.hostfile import HostSelection
from bench.core import collectives, provenance, results, storage
from bench.core.config import LaunchConfig, validate_launch
from bench.core.errors import BadInput
from bench.core.options import opt, seconds
from bench.core.sizes import parse_sizes
from bench.jobs import numerics as numerics_job
from bench.jobs.gate import accel_of, device_of, inspect_cluster
from bench.jobs.plan import plan_resources
from bench.launch.execute import execute
from bench.launch.plan import build, plan_json, write_files

CPU_SIZES = "1K:4M"
GPU_SIZES = "1K:256M"
# The share of the smallest GPU's memory a comm rank's buffers may take: the rest is the CUDA context, NCCL's
# own buffers (NCCL_BUFFSIZE per channel and peer) and the caching allocator's slack.
GPU_MEMORY_SHARE = 0.5


@dataclass(frozen=True, kw_only=True, slots=True)
class CommConfig(LaunchConfig):
    """What bench comm measures, and where (LaunchConfig)."""

    op: str = opt("collective", default="all_reduce", choices=collectives.MEASURED)
    sizes: str | None = opt(f"per-rank buffer sizes: powers of two LO..HI, or a list (default {CPU_SIZES} on CPU, "
                            f"{GPU_SIZES} on GPUs)", default=None, metavar="LO:HI|S,S")
    iters: int = opt("timed iterations per size", default=20, metavar="N")
    # Iterations, beside --iters: bench run's --timing-warmup counts steps (--warmup-steps: the learning rate's).
    warmup: int = opt("untimed iterations per size", default=5, metavar="N", flag="--warmup-iters",
                      aliases=("--warmup", "--timing-warmup"))
    timeout: float = opt("seconds (or 90s, 5m) without progress before the ranks are declared hung; shorter than "
                         "bench run's 300: a collective's iteration is milliseconds, a step can be minutes",
                         default=120.0, metavar="S", parse=seconds)

    def __post_init__(self) -> None:
        validate_launch(self)
        if self.op not in collectives.MEASURED:
            raise BadInput(f"--op: must be one of {', '.join(collectives.MEASURED)}, got {self.op!r}")
        if self.iters < 1 or self.warmup < 0:
            raise BadInput(f"--iters/--warmup-iters: need iters >= 1 and warm-up iterations >= 0, got "
                           f"{self.iters}/{self.warmup}")
        if self.sizes is not None:
            parse_sizes(self.sizes)

    def size_list(self, device: str) -> list[int]:
        return parse_sizes(self.sizes or (CPU_SIZES if device == "cpu" else GPU_SIZES))


def run(cfg: CommConfig, hosts: HostSelection, quiet: bool = False) -> dict[str, Any]:
    """Plan exactly as bench run does (preflight, inventory, the verdict, the nodes' device); measure.

    From a GPU-less head node the compute nodes' GPUs decide the device (NCCL,
    and the GPU default sizes), not the node bench runs on.
    """
    placement = plan_resources(cfg, hosts)
    storage.check_room(cfg.out, placement.world)
    inventory, verdict = inspect_cluster(cfg, placement, quiet, run_root=cfg.out)
    device = device_of(cfg, placement, verdict)
    sizes, cap = cap_sizes(cfg.size_list(device), cfg.op, placement.world,
                           verdict.get("min_memory_mib") if device == "cuda" else None)
    if cap["dropped"] and not quiet:
        print(f"bench comm: {cap['reason']}", file=sys.stderr)
    rec = measure(placement.resources, placement.launcher, device, op=cfg.op, sizes=sizes,
                  iters=cfg.iters, warmup=cfg.warmup, out_root=cfg.out, timeout=cfg.timeout,
                  slots_of=placement.slots_of, master_addr=cfg.master_addr, master_port=cfg.master_port,
                  container_exec=cfg.container_exec, accel=accel_of(device, verdict),
                  extra={"inventory": inventory, "verdict": verdict, "sizes_cap": cap})
    return rec


def cap_sizes(sizes: list[int], op: str, n: int, min_memory_mib: float | None) -> tuple[list[int], dict[str, Any]]:
    """The sizes whose buffers fit GPU_MEMORY_SHARE of the smallest GPU, and what was dropped and why.

    A rank holds Collective.rank_bytes (reduce_scatter's input is n x the size, plus a pristine copy): at
    256M elements and n = 32 that is 16 GiB, more than a 16 GB T4 has. No GPU memory known (CPU): all kept.
    """
    c = collectives.get(op)
    if not min_memory_mib:
        return sizes, {"dropped": [], "limit_bytes": None, "reason": "no GPU memory to fit: sizes as given"}
    limit = int(min_memory_mib * 2**20 * GPU_MEMORY_SHARE)
    kept = [s for s in sizes if c.rank_bytes(s, n) <= limit]
    dropped = [s for s in sizes if s not in kept]
    if not kept:
        raise BadInput(f"--sizes: even {sizes[0]} bytes of {op} over {n} ranks needs "
                       f"{c.rank_bytes(sizes[0], n) / 2**30:.1f} GiB per rank, over {GPU_MEMORY_SHARE:.0%} of the "
                       f"smallest GPU ({min_memory_mib:.0f} MiB)")
    reason = (f"{op} over {n} ranks: sizes above {kept[-1]} bytes left out ({len(dropped)}: up to {dropped[-1]}), "
              f"their buffers (pristine and working input and output, {c.rank_bytes(dropped[0], n) / 2**30:.1f}+ "
              f"GiB per rank) exceed {GPU_MEMORY_SHARE:.0%} of the smallest GPU's {min_memory_mib:.0f} MiB"
              if dropped else f"every size fits {GPU_MEMORY_SHARE:.0%} of the smallest GPU's {min_memory_mib:.0f} MiB")
    return kept, {"dropped": dropped, "limit_bytes": limit, "min_memory_mib": min_memory_mib, "reason": reason}


def _layout(op: str, iters: int, warmup: int, world: int, groups: list[list[int]] | None,
            group_names: list[str] | None, rounds: list[list[int]] | None) -> tuple[list, list[str], list]:
    """(groups, their names, rounds) with the defaults filled in; BadInput for a bad op or count, ValueError for
    groups of one round that share a rank (a caller's bug)."""
    if op not in collectives.MEASURED:
        raise BadInput(f"--op: must be one of {', '.join(collectives.MEASURED)}, got {op!r}")
    if iters < 1 or warmup < 0:
        raise BadInput(f"--iters/--warmup-iters: need iters >= 1 and warm-up iterations >= 0, got {iters}/{warmup}")
    groups = groups or [list(range(world))]
    names = group_names or ["all" if len(g) == world else f"g{i}" for i, g in enumerate(groups)]
    rounds = rounds or [[gi] for gi in range(len(groups))]
    for r in rounds:
        taken = [rank for gi in r for rank in groups[gi]]
        if len(taken) != len(set(taken)):
            raise ValueError(f"comm rounds: groups measured at the same time share a rank: {r}")
    return groups, names, rounds


def measure(resources: dict[str, list[int]], launcher: str, device: str, *, op: str = "all_reduce",
            sizes: list[int], iters: int = 20, warmup: int = 5, out_root: str = "results",
            groups: list[list[int]] | None = None, group_names: list[str] | None = None,
            rounds: list[list[int]] | None = None, timeout: float = 120.0, slots_of: dict[str, int] | None = None,
            master_addr: str | None = None, master_port: int | None = None,
            environ: dict[str, str] | None = None, container_exec: str | None = None,
            extra: dict[str, Any] | None = None, numerics: dict[str, Any] | None = None,
            accel: str | None = None) -> dict[str, Any]:
    """Launch the comm ranks, wait, and return a "comm" record (also appended to its results.jsonl).

    groups: lists of global ranks (default: all ranks); group_names label them in the rows (default
    "all" / "g<i>"). rounds: lists of indices into groups: the groups of a round are measured at the same
    time (they must not share a rank), the rounds one after another (default: one group a round).
    numerics: plan.json's "numerics" (bench.jobs.numerics.first): every rank runs validate's numerics job
    before its group exists; the record's "numerics" has each rank's entry (the prolog's one launch).
    accel: the nodes' accelerator backend (bench.jobs.gate.accel_of), whose visible-devices variable the ranks get.
    """
    environ = dict(os.environ if environ is None else environ)
    world = sum(len(s) for s in resources.values())
    groups, names, rounds = _layout(op, iters, warmup, world, groups, group_names, rounds)
    storage.check_room(out_root, world)
    run_id = results.new_run_id(out_root, prefix="comm-")
    run_dir = os.path.abspath(os.path.join(out_root, run_id))
    lp = build(resources, launcher, run_dir, device, master_addr, master_port, environ=environ,
               module="bench.worker.comm", container_exec=container_exec, accel=accel)
    plan = plan_json(lp, resources, device, timeout)
    if numerics:
        plan["numerics"] = numerics
    spec = {"op": op, "sizes": sizes, "iters": iters, "warmup": warmup, "dtype": "float32",
            "groups": groups, "group_names": names, "rounds": rounds}
    results.write_json_atomic(os.path.join(run_dir, "comm.json"), spec)
    results.write_json_atomic(os.path.join(run_dir, "plan.json"), plan)
    write_files(lp, resources, slots_of)
    outcome = execute(lp, run_dir, timeout=timeout)
    body: dict[str, Any] = {"run_id": run_id, "run_dir": run_dir, "duration_s": outcome.duration_s,
                            "comm": spec, "plan": plan,
                            "provenance": provenance.collect(plan, outcome.summary), **(extra or {})}
    status = outcome.status
    if status == "ok" and outcome.summary is not None:
        body["rows"] = rows_from_summary(outcome.summary, op, names)
        body["timing"] = TIMING
        body["groups_made"] = outcome.summary.get("groups_made")  # how the ranks made their groups, and why
        body["wrong"] = sum(r["wrong"] for r in body["rows"])
        if body["wrong"]:
            status = "failed"
            body["error"] = {"where": "check", "reason": f"{body['wrong']} wrong value(s) after {op}: "
                             "a rank received data other than what was sent (see the #wrong column)"}
    else:
        body["error"] = outcome.error or {"where": "launcher", "reason": "no summary"}
    if numerics:
        body["numerics"] = numerics_job.collect(run_dir, resources, outcome, folder="numerics")
    rec = results.make_record("comm", status, **body)
    results.append(os.path.join(run_dir, "results.jsonl"), rec)
    return rec
