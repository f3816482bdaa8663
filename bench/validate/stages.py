"""bench validate's order of checks and its record: an acceptance test of a cluster, GPU by GPU, link by link.

    bench validate --hostfile hostfiles/vector                        # quick: minutes
    bench validate --hostfile hostfiles/vector --level full --junit validate.xml --drain-file drain.txt
    salloc -N 4 --gpus-per-node 8 bench validate                    # the allocation, through srun steps
    bench validate --level prolog                                     # this node only, in seconds (Slurm)
    bench validate --level health --since-job                         # counters and kernel log: an epilog

Stages, in the order of the registry of checks (bench.validate.checks: one module per check, which
says its levels, the launch it rides, how it runs and judges, its plan and its docs row; `bench validate
--dry-run` and docs/validate.md's table list them); each adds PASS, WARN, FAIL, ERROR or SKIP rows with a
reason, per GPU, node, pair and cluster.
A GPU or node that FAILs (or could not be checked: ERROR) is left out of the
later stages (SKIP rows say so); the rest go on, unless --fail-fast. The
record gives each node's verdict and action (bench.validate.verdicts), what to
drain (bench.validate.drain) and each stage's duration. Exit 0: every node
judged, none to drain; 1: a node to drain (or a cluster check FAILed); 3:
nothing to drain, but a node is unknown; 2: bad input.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import asdict
from typing import Any, Callable

from bench.analysis import references
from bench.cluster.hostfile import HostSelection
from bench.cluster.slurm import no_slurm
from bench.core import results, storage
from bench.core.errors import BadInput
from bench.history import hook
from bench.history.provenance import of_nodes
from bench.validate import baseline, checks, drain, health, numerics, tree, verdicts
from bench.validate.config import ValidateConfig
from bench.validate.state import CLUSTER, NOT_RUN, STATUSES, Stage, Validation
from bench.launch.registry import LOCAL
from bench.validate.where import where

# Each check and the function that runs and judges it, in order (the registry's).
STAGES: tuple[tuple[str, Callable[[Validation], None]], ...] = tuple((c.name, c.runner()) for c in checks.REGISTRY)
ALWAYS = checks.always()


def resources_of(cfg: ValidateConfig, hosts: HostSelection) -> dict[str, list[int]]:
    """The hosts and slots to check (bench.validate.where)."""
    return where(cfg, hosts).resources


def _writable(cfg: ValidateConfig) -> None:
    for option, path in (("--junit", cfg.junit), ("--drain-file", cfg.drain_file),
                         ("--save-numerics-reference", cfg.save_numerics_reference)):
        if path:
            try:
                open(path, "a").close()
            except OSError as e:
                raise BadInput(f"{option}: cannot write {path!r} ({e.strerror})") from None


def refuse(cfg: ValidateConfig, hosts: HostSelection):
    """Every refusal of the input that writes nothing (--dry-run refuses what the run would): the hosts (where),
    the reference table and the topology (bench.validate.tree.find: a --topology file that Slurm would refuse is
    refused here)."""
    for option, asked in (("--drain", cfg.drain), ("--undrain", cfg.resume)):
        missing = no_slurm() if asked else None
        if missing:
            raise BadInput(f"{option}: drains and resumes Slurm nodes, and Slurm is not here: {missing}")
    w = where(cfg, hosts)
    table = references.load(cfg.reference)
    numerics.load_references(cfg.numerics_reference)  # bad input before anything runs
    health.since_of(cfg)  # --since-job outside a Slurm job: refused before any node is reached
    return w, table, tree.find(cfg, len(w.resources))


def prepare(cfg: ValidateConfig, hosts: HostSelection, prefix: str = "validate-") -> Validation:
    """Everything that can refuse the input, before any node is reached; the Validation in its new folder."""
    w, table, found = refuse(cfg, hosts)
    _writable(cfg)
    storage.check_room(cfg.out, sum(len(s) for s in w.resources.values()))
    run_id = results.new_run_id(cfg.out, prefix=prefix)
    vdir = os.path.abspath(os.path.join(cfg.out, run_id))
    if w.hostfile_text is not None:
        # The allocation as a hostfile: every later launch (and a person) reads the same hosts from it.
        path = os.path.join(vdir, "hostfile")
        results.write_text_atomic(path, w.hostfile_text)
        hosts = HostSelection(hostfile=path)
    v = Validation(cfg, hosts, w.resources, table, vdir, launcher=w.launcher)
    v.tree, v.topology_tried = found.tree, found.tried
    return v


def saved(cfg: ValidateConfig, sources: dict[str, str] | None = None) -> dict[str, Any]:
    """--health-from DIR: one node's saved reports through the same parsers, table, verdict and exit status."""
    from bench.cluster.health import from_dir

    cfg = dataclasses.replace(cfg, level="health")  # what it judges: the health check, nothing measured
    report = from_dir(cfg.health_from, since=health.since_of(cfg))
    host = report.get("host") or os.path.basename(os.path.normpath(cfg.health_from))
    # Its GPUs: those the reports list, and those a finding names (a saved nvlink or dcgmi report alone).
    slots = sorted({g["index"] for g in report.get("gpus") or [] if g.get("index") is not None} |
                   {f["gpu_index"] for f in report.get("findings") or [] if f.get("gpu_index") is not None})
    table = references.load(cfg.reference)
    _writable(cfg)
    run_id = results.new_run_id(cfg.out, prefix="validate-")
    v = Validation(cfg, HostSelection(), {host: slots}, table, os.path.abspath(os.path.join(cfg.out, run_id)),
                   launcher=LOCAL)
    v.health_reports[host] = report
    t0 = time.time()
    health.health(v)
    v.stages.append(Stage("health", time.time() - t0, 0, 0))
    rec = {**record(v, run_id, time.time() - t0), "sources": sources or {}}
    results.append(os.path.join(v.vdir, "results.jsonl"), rec)
    return rec


def validate(cfg: ValidateConfig, hosts: HostSelection, sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Run every check in order over the selected hosts; returns the "validate" record (also appended).
    sources: where each option's value came from (bench.commands.profile.recorded), kept in the record."""
    if cfg.health_from is not None:
        return saved(cfg, sources)
    v = prepare(cfg, hosts)
    base = baseline.load(cfg)
    run_id = os.path.basename(v.vdir)
    t0 = time.time()
    stop_why = None
    try:
        for name, stage in STAGES:
            if stop_why is None and cfg.fail_fast and v.failed():
                stop_why = f"{NOT_RUN}: --fail-fast stops after a FAIL or ERROR"
            why = stop_why or (None if name in ALWAYS or cfg.wanted(name) else
                               f"not asked for (--checks, or not part of --level {cfg.level})")
            if why:
                skip(v, name, why)
                continue
            s0, launches, ranks = time.time(), v.launches, sum(len(s) for s in v.good_resources().values())
            up = v.startup_s
            stage(v)
            v.stages.append(Stage(name, time.time() - s0, ranks, v.launches - launches,
                                  v.startup_s - up if v.launches > launches else None))
            if name == "inventory" and cfg.wanted("inter-node"):
                # After the inventory: a node's leaf may be known by the hostname it gave, not the hostfile's.
                for line in tree.lines(_found(v), list(v.resources), v.hostname_of, cfg.pairs_seed, v.level.pairs):
                    print(f"bench validate: {line}", file=sys.stderr)
            if name == "preflight" and v.failed() and not cfg.keep_going:
                # The cluster as given cannot pass; say so in seconds, with the way on.
                lost = [h for h in v.resources if h not in v.good]
                stop_why = (f"{NOT_RUN}: {', '.join(lost)} did not pass preflight and --no-keep-going stops there; "
                            f"fix it, or rerun with --exclude {'@'.join(lost)} (or without --no-keep-going to "
                            "check the rest now)")
                print(f"bench validate: {stop_why}", file=sys.stderr)
    except KeyboardInterrupt:
        # What was judged before the interrupt is kept (no drain, no verdict on the rest), then bench stops.
        results.append(os.path.join(v.vdir, "results.jsonl"),
                       {**record(v, run_id, time.time() - t0, interrupted=True), "sources": sources or {}})
        raise
    if base is not None:
        baseline.against(v, *base)
    kept = hook.before(v)  # the store's drift rows; the store is never a dependency (bench.history.hook)
    rec = {**record(v, run_id, time.time() - t0), "sources": sources or {}}
    results.append(os.path.join(v.vdir, "results.jsonl"), rec)
    kept.keep(rec)
    return rec


def skip(v: Validation, name: str, why: str) -> None:
    """This check is not run; every node it would cover gets a SKIP row saying why."""
    for row, scope in checks.get(name).skip:
        if scope == "nodes":
            for h in v.resources:
                v.add(row or name, h, "SKIP", reason=why, host=h)
        else:
            v.add(row or name, CLUSTER, "SKIP", reason=why)


def record(v: Validation, run_id: str, duration: float, interrupted: bool = False,
           earlier: list[str] = ()) -> dict[str, Any]:
    """The validate record; interrupted: the rows so far, and nothing drained or written for the scheduler.
    earlier: the nodes earlier rounds of a soak drained, counted toward --max-drain's one limit."""
    statuses = [c.status for c in v.checks]
    entries = drain.drain_list(v.checks)
    nodes = verdicts.node_verdicts(v.checks, v.resources)
    unknown = [h for h, n in nodes.items() if n["verdict"] == "unknown"]
    drained = resumed = None
    names = {h: n.split(".")[0] for h, n in v.hostname_of.items()}
    hosts = list(v.resources)
    leaves = v.leaves(hosts)
    held = drain.breaker(entries, v.cfg.drain_limit(len(v.resources)), len(v.resources),
                         dict(zip(hosts, leaves)) if leaves else None, earlier)
    kept = set(held["held"]) if held is not None else set()
    for h in kept:
        nodes[h]["action"] = f"held (not drained): {held['reason']}; {nodes[h]['action']}"
    if v.cfg.drain_file and not interrupted:
        drain.write_drain_file(v.cfg.drain_file, entries, held)
    if v.cfg.drain and not interrupted and [e for e in entries if e["host"] not in kept]:
        drained = drain.drain_slurm([e for e in entries if e["host"] not in kept], names)
    if v.cfg.resume and not interrupted:
        # What this run judged (the names drain reasons carry: throughput, matmul, health, ...).
        resumed = drain.resume_slurm(nodes, names, sorted({c.check for c in v.checks if c.status != "SKIP"}))
    exit_status = verdicts.exit_status(nodes, v.checks)
    status = "interrupted" if interrupted else "ok" if exit_status == 0 else "failed"
    return results.make_record(
        "validate", status, run_id=run_id, run_dir=v.vdir, duration_s=duration,
        result=verdicts.result(v.checks), exit_status=exit_status, level=v.cfg.level, hosts=list(v.resources),
        resources=v.resources, device=v.device, launcher=v.launcher, nodes=nodes,
        failed_hosts=drain.hosts_of(entries), drain=entries, unknown=unknown,
        exclude=drain.exclude_spec(entries, unknown), drained=drained, resumed=resumed, identity=v.identity(),
        checks_run=[n for n, _ in STAGES if n in ALWAYS or v.cfg.wanted(n)],
        counts={s: statuses.count(s) for s in STATUSES},
        checks=[c.as_dict() for c in v.checks], stages=[asdict(s) for s in v.stages], measured=v.figures,
        runs=v.runs, reference_table=v.table.path, held=held, pairing=v.pairing_plan(),
        nodes_provenance=of_nodes(v.inventory),
        topology=tree.record(_found(v), list(v.resources), v.hostname_of, v.cfg.pairs_seed, v.level.pairs))


def _found(v: Validation) -> tree.Found:
    return tree.Found(v.tree, v.topology_tried)
