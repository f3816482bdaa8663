"""bench validate's order of checks and its record: an acceptance test of a cluster, GPU by GPU, link by link.

    bench validate --hostfile hostfiles/vector                        # quick: minutes
    bench validate --hostfile hostfiles/vector --level full --junit validate.xml --drain-file drain.txt
    bench validate --level prolog --drain                             # this node only, in seconds (Slurm)

Stages, in order (this list is the one place that orders them); each adds
PASS, WARN, FAIL or SKIP rows with a reason, per GPU, node, pair and cluster:
  preflight    ssh, this machine's Python and package versions (bench.validate.nodes)
  inventory    each node's GPUs and links (bench probe); heterogeneity: the verdict
  throughput   every GPU alone, all at once (bench.validate.gpus)
  numerics     the same deterministic job on every GPU, bit for bit; the exact matmul (bench.validate.numerics)
  intra-node   each node's all-reduce over its own GPUs, every node at once (bench.validate.links)
  inter-node   node pairs in rounds of disjoint pairs, bisection to the node (bench.validate.pairs)
  training     a short data-parallel run over what is still good (bench.validate.training)
  stragglers   the costliest GPU, rank or link, and the --exclude that drops it (bench.validate.scaling)
  scaling      predicted data-parallel efficiency beside the measured one
A GPU or node that FAILs is left out of the later stages (SKIP rows say so);
the rest go on, unless --fail-fast. The record lists what to drain
(bench.validate.drain) and each stage's duration. Exit 0: no FAIL (WARNs
allowed); 1: a FAIL; 2: bad input.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from typing import Any, Callable

from bench.analysis import references
from bench.cluster.hostfile import HostSelection
from bench.core import results, storage
from bench.core.errors import BadInput
from bench.validate import baseline, drain, gpus, links, nodes, numerics, pairs, scaling, training
from bench.validate.config import ValidateConfig
from bench.validate.state import CLUSTER, Stage, Validation

STAGES: tuple[tuple[str, Callable[[Validation], None]], ...] = (
    ("preflight", nodes.preflight), ("inventory", nodes.inventory), ("throughput", gpus.throughput),
    ("numerics", numerics.numerics), ("intra-node", links.intra_node), ("inter-node", pairs.inter_node),
    ("training", training.training), ("stragglers", scaling.stragglers), ("scaling", scaling.scaling))
ALWAYS = ("preflight", "inventory")


def resources_of(cfg: ValidateConfig, hosts: HostSelection) -> dict[str, list[int]]:
    """The hosts and slots to check: the hostfile's, or at --level prolog this node's own."""
    if cfg.level == "prolog":
        if hosts.hostfile:
            raise BadInput("--level prolog: checks this node only; give no --hostfile (run it on each node)")
        from bench.core.config import RunConfig
        from bench.jobs.plan import plan_resources

        return dict(plan_resources(RunConfig(), HostSelection()).resources)
    if not hosts.hostfile:
        raise BadInput("--hostfile: bench validate needs the hostfile of the cluster to check (or --level prolog "
                       "for this node alone)")
    resources = hosts.resources()
    assert resources is not None
    return resources


def validate(cfg: ValidateConfig, hosts: HostSelection) -> dict[str, Any]:
    """Run every check in order over the selected hosts; returns the "validate" record (also appended)."""
    resources = resources_of(cfg, hosts)
    table = references.load(cfg.reference)
    numerics.load_references(cfg.numerics_reference)  # bad input before anything runs
    for option, path in (("--junit", cfg.junit), ("--drain-file", cfg.drain_file),
                         ("--save-numerics-reference", cfg.save_numerics_reference)):
        if path:
            try:
                open(path, "a").close()
            except OSError as e:
                raise BadInput(f"{option}: cannot write {path!r} ({e.strerror})") from None
    base = baseline.load(cfg)
    storage.check_room(cfg.out, sum(len(s) for s in resources.values()))
    run_id = results.new_run_id(cfg.out, prefix="validate-")
    vdir = os.path.abspath(os.path.join(cfg.out, run_id))
    v = Validation(cfg, hosts, resources, table, vdir)
    t0 = time.time()
    stop_why = None
    try:
        for name, stage in STAGES:
            if stop_why is None and cfg.fail_fast and v.failed():
                stop_why = "--fail-fast: not run after a FAIL"
            why = stop_why or (None if name in ALWAYS or cfg.wanted(name) else
                               f"not asked for (--checks, or not part of --level {cfg.level})")
            if why:
                skip(v, name, why)
                continue
            s0, launches, ranks = time.time(), v.launches, sum(len(s) for s in v.good_resources().values())
            stage(v)
            v.stages.append(Stage(name, time.time() - s0, ranks, v.launches - launches))
            if name == "preflight" and v.failed() and not cfg.keep_going:
                # The cluster as given cannot pass; say so in seconds, with the way on.
                lost = [h for h in v.resources if h not in v.good]
                stop_why = (f"not run: {', '.join(lost)} failed preflight; fix it, or rerun with --exclude "
                            f"{'@'.join(lost)} (or --keep-going to check the rest now)")
                print(f"bench validate: {stop_why}", file=sys.stderr)
    except KeyboardInterrupt:
        # What was judged before the interrupt is kept (no drain, no verdict on the rest), then bench stops.
        results.append(os.path.join(vdir, "results.jsonl"), record(v, run_id, time.time() - t0, interrupted=True))
        raise
    if base is not None:
        baseline.against(v, *base)
    rec = record(v, run_id, time.time() - t0)
    results.append(os.path.join(vdir, "results.jsonl"), rec)
    return rec


def skip(v: Validation, name: str, why: str) -> None:
    """This check is not run; every node it would cover gets a SKIP row saying why."""
    if name == "inventory":
        for h in v.resources:
            v.add("inventory", h, "SKIP", reason=why, host=h)
        v.add("heterogeneity", CLUSTER, "SKIP", reason=why)
        return
    if name in ("preflight", "throughput", "numerics", "intra-node", "inter-node"):
        for h in v.resources:
            v.add(name, h, "SKIP", reason=why, host=h)
    if name in ("inter-node", "training", "stragglers", "scaling"):
        v.add(name, CLUSTER, "SKIP", reason=why)


def record(v: Validation, run_id: str, duration: float, interrupted: bool = False) -> dict[str, Any]:
    """The validate record; interrupted: the rows so far, and nothing drained or written for the scheduler."""
    statuses = [c.status for c in v.checks]
    verdict = "FAIL" if "FAIL" in statuses else "WARN" if "WARN" in statuses else "PASS"
    entries = drain.drain_list(v.checks)
    drained = None
    if v.cfg.drain_file and not interrupted:
        drain.write_drain_file(v.cfg.drain_file, entries)
    if v.cfg.drain and not interrupted:
        drained = drain.drain_slurm(entries, {h: n.split(".")[0] for h, n in v.hostname_of.items()})
    status = "interrupted" if interrupted else "failed" if verdict == "FAIL" else "ok"
    return results.make_record(
        "validate", status, run_id=run_id, run_dir=v.vdir, duration_s=duration,
        result=verdict, level=v.cfg.level, hosts=list(v.resources), resources=v.resources, device=v.device,
        failed_hosts=drain.hosts_of(entries), drain=entries, exclude=drain.exclude_spec(entries),
        drained=drained, identity=v.identity(),
        checks_run=[n for n, _ in STAGES if n in ALWAYS or v.cfg.wanted(n)],
        counts={s: statuses.count(s) for s in ("PASS", "WARN", "FAIL", "SKIP")},
        checks=[asdict(c) for c in v.checks], stages=[asdict(s) for s in v.stages], measured=v.figures,
        runs=v.runs, reference_table=v.table.path)
