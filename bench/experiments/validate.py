"""bench validate's order of checks and its record: an acceptance test of a cluster, check by check, node by node.

    bench validate --hostfile hostfiles/vector                        # quick: minutes
    bench validate --hostfile hostfiles/vector --level full --junit validate.xml
    bench validate --hostfile hostfiles/tesla --reference my_refs.json --json

Checks, in order; each gives PASS, WARN, FAIL or SKIP with a reason, per node
and for the cluster:
  preflight      ssh, this machine's Python and package versions (bench.cluster.preflight)
  inventory      each node's GPUs (bench probe); heterogeneity: the verdict (bench.cluster.hetero)
  throughput     each node alone, all in parallel: a short one-rank `bench run`,
                 against bench/data/reference_throughput.json (GPU model, precision,
                 model, micro batch) or, without a reference, the cluster's median
  bandwidth      all-reduce bus bandwidth of each node's ring-neighbour pairs and
                 of the whole set (`bench comm`); a node is judged by its best pair
  training       a short data-parallel run over the nodes still good: loss falls,
                 world size as planned, every rank ran the same steps to a similar loss
  stragglers     the slowest GPU, node or link, its cost (metrics.straggler_cost)
                 and the --exclude string that drops it (bench.analysis.stragglers)
  scaling        predicted data-parallel efficiency (metrics.predicted_dp_efficiency)
                 beside the measured one
A host that FAILs a check is left out of the later ones (SKIP); the rest go on,
unless --fail-fast. Exit 0: no FAIL (WARNs allowed, shown); 1: a FAIL; 2: bad input.
--json prints one document (the "validate" record) on stdout; --junit FILE
writes one JUnit test case per check per node.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from typing import Any

from bench.analysis import references
from bench.cluster.hostfile import HostSelection
from bench.core import results, storage
from bench.core.errors import BadInput
from bench.experiments import cluster_checks, link_checks, node_checks
from bench.experiments.validation import CLUSTER, ValidateConfig, Validation

STAGES = (node_checks.preflight, node_checks.inventory, node_checks.throughput, link_checks.bandwidth,
          cluster_checks.training, cluster_checks.stragglers, cluster_checks.scaling)


def validate(cfg: ValidateConfig, hosts: HostSelection) -> dict[str, Any]:
    """Run every check in order over the selected hosts; returns the "validate" record (also appended)."""
    if not hosts.hostfile:
        raise BadInput("--hostfile: bench validate needs the hostfile of the cluster to check")
    resources = hosts.resources()
    assert resources is not None
    table = references.load(cfg.reference)
    if cfg.junit:
        try:
            open(cfg.junit, "a").close()
        except OSError as e:
            raise BadInput(f"--junit: cannot write {cfg.junit!r} ({e.strerror})") from None
    baseline = cluster_checks.load_baseline(cfg)  # bad input before anything runs
    storage.check_room(cfg.out, sum(len(s) for s in resources.values()))
    run_id = results.new_run_id(cfg.out, prefix="validate-")
    vdir = os.path.abspath(os.path.join(cfg.out, run_id))
    v = Validation(cfg, hosts, resources, table, vdir)
    t0 = time.time()
    stop_why = None
    for stage in STAGES:
        if stop_why is None and cfg.fail_fast and v.failed():
            stop_why = "--fail-fast: not run after a FAIL"
        if stop_why:
            cluster_checks.skip_rest(v, stage, stop_why)
            continue
        stage(v)
        if stage is node_checks.preflight and v.failed() and not cfg.keep_going:
            # The cluster as given cannot pass; say so in seconds, with the way on.
            lost = [h for h in v.resources if h not in v.good]
            stop_why = (f"not run: {', '.join(lost)} failed preflight; fix it, or rerun with --exclude "
                        f"{'@'.join(lost)} (or --keep-going to check the rest now)")
            print(f"bench validate: {stop_why}", file=sys.stderr)
    if baseline is not None:
        cluster_checks.against_baseline(v, *baseline)
    rec = record(v, run_id, time.time() - t0)
    results.append(os.path.join(vdir, "results.jsonl"), rec)
    return rec


def record(v: Validation, run_id: str, duration: float) -> dict[str, Any]:
    statuses = [c.status for c in v.checks]
    verdict = "FAIL" if "FAIL" in statuses else "WARN" if "WARN" in statuses else "PASS"
    failed_hosts = sorted({c.node for c in v.checks if c.status == "FAIL" and c.node != CLUSTER})
    return results.make_record(
        "validate", "failed" if verdict == "FAIL" else "ok", run_id=run_id, run_dir=v.vdir, duration_s=duration,
        result=verdict, level=v.cfg.level, hosts=list(v.resources), device=v.device, failed_hosts=failed_hosts,
        counts={s: statuses.count(s) for s in ("PASS", "WARN", "FAIL", "SKIP")},
        checks=[asdict(c) for c in v.checks], measured=v.figures, runs=v.runs, reference_table=v.table.path)
