"""`bench validate`: an acceptance test of a cluster, check by check, node by node.

    bench validate --hostfile hostfiles/vector                        # quick: minutes
    bench validate --hostfile hostfiles/vector --level full --junit validate.xml
    bench validate --hostfile hostfiles/tesla --reference my_refs.json --json

Checks, in order; each gives PASS, WARN, FAIL or SKIP with a reason, per node
and for the cluster:
  preflight      ssh, this machine's Python and package versions (bench.preflight)
  inventory      each node's GPUs (bench probe); heterogeneity: the verdict (bench.hetero)
  throughput     each node alone, all in parallel: a short one-rank `bench run`,
                 against bench/data/reference_throughput.json (GPU model, precision,
                 model, micro batch) or, without a reference, the cluster's median
  bandwidth      all-reduce bus bandwidth of each node's ring-neighbour pairs and
                 of the whole set (`bench comm`); a node is judged by its best pair
  training       a short data-parallel run over the nodes still good: loss falls,
                 world size as planned, every rank ran the same steps to a similar loss
  stragglers     the slowest GPU, node or link, its cost (metrics.straggler_cost)
                 and the --exclude string that drops it (bench.stragglers)
  scaling        predicted data-parallel efficiency (metrics.predicted_dp_efficiency)
                 beside the measured one
A host that FAILs a check is left out of the later ones (SKIP); the rest go on,
unless --fail-fast. Exit 0: no FAIL (WARNs allowed, shown); 1: a FAIL; 2: bad input.
--json prints one document (the "validate" record) on stdout; --junit FILE
writes one JUnit test case per check per node.
"""

from __future__ import annotations

import json
import os
import sys
import time
from argparse import Namespace
from dataclasses import asdict, dataclass
from typing import Any

from bench import hostfile, results
from bench.errors import EXIT_FAILED, BadInput, RunFailed

HELP = "acceptance-test a cluster: preflight, inventory, per-node throughput, bandwidth, a DP run, stragglers, scaling"
CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class Level:
    model: str
    micro_batch: int
    steps: int
    timing_warmup: int
    synthetic_size: int
    dp_steps: int
    sizes_cpu: tuple[int, ...]
    sizes_gpu: tuple[int, ...]
    iters: int
    comm_warmup: int
    timeout: float


LEVELS = {
    # Tiny everywhere: the smallest preset on synthetic data, two message sizes.
    "quick": Level("vit-micro-p4-32", 16, 12, 4, 512, 16, (4 << 10, 64 << 10), (1 << 20, 64 << 20), 5, 2, 240.0),
    # The study's model and batch; messages up to ViT-B/16's 344 MB of fp32 gradients.
    "full": Level("vit-b16-224", 64, 50, 10, 10000, 60, (64 << 10, 1 << 20, 16 << 20),
                  (1 << 20, 16 << 20, 64 << 20, 256 << 20, 512 << 20), 20, 5, 900.0),
}


@dataclass(slots=True)
class Check:
    check: str
    node: str
    status: str            # PASS, WARN, FAIL, SKIP
    value: str = ""
    reference: str = ""
    reason: str = ""
    duration_s: float = 0.0


class Validation:
    """The state of one validate run: its checks and the hosts still taking part."""

    def __init__(self, args: Namespace, resources: dict[str, list[int]], level: Level, table, vdir: str):
        self.args, self.resources, self.level, self.table, self.vdir = args, resources, level, table, vdir
        self.checks: list[Check] = []
        self.good: list[str] = list(resources)
        self.hostname_of: dict[str, str] = {}
        self.inventory: dict[str, dict] = {}
        self.device = "cpu"
        self.figures: dict[str, Any] = {"node_step_s": {}, "node_images_per_s": {}, "node_busbw": {}}
        self.runs: dict[str, str] = {}

    def add(self, check: str, node: str, status: str, value: str = "", reference: str = "", reason: str = "",
            t0: float | None = None) -> None:
        self.checks.append(Check(check, node, status, value, reference, reason,
                                 time.time() - t0 if t0 is not None else 0.0))
        if status == "FAIL" and node in self.good:
            self.good.remove(node)

    def skip_excluded(self, check: str, why: dict[str, str]) -> None:
        for host in self.resources:
            if host not in self.good and not any(c.check == check and c.node == host for c in self.checks):
                self.add(check, host, "SKIP", reason=why.get(host, "excluded after a FAIL in an earlier check"))

    def failed(self) -> bool:
        return any(c.status == "FAIL" for c in self.checks)

    def run_args(self, hosts: dict[str, list[int]]) -> Namespace:
        spec = "@".join(f"{h}:{','.join(map(str, s))}" for h, s in hosts.items())
        return Namespace(hostfile=self.args.hostfile, include=spec, exclude="", num_nodes=-1)

    def run_config(self, hosts: list[str], steps: int):
        from bench.config import RunConfig
        from bench.remote import is_local

        lv = self.level
        launcher = "local" if len(hosts) == 1 and is_local(hosts[0]) else "pdsh"
        return RunConfig(model=lv.model, dataset="synthetic", synthetic_size=lv.synthetic_size, steps=steps,
                         timing_warmup=lv.timing_warmup, micro_batch=lv.micro_batch, eval=False, launcher=launcher,
                         precision=self.args.precision, device=self.device, timeout=lv.timeout,
                         out=os.path.join(self.vdir, "runs"))


def add_arguments(p) -> None:
    hostfile.add_host_arguments(p, num_gpus=False)
    p.add_argument("--level", choices=tuple(LEVELS), default="quick",
                   help="quick: tiny runs (vit-micro-p4-32, synthetic, few steps); full: ViT-B/16, more steps")
    p.add_argument("--reference", metavar="FILE", default=None,
                   help="reference table (default bench/data/reference_throughput.json)")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32", help="training precision")
    p.add_argument("--junit", metavar="FILE", default=None, help="write one JUnit test case per check per node")
    p.add_argument("--out", default="results", help="results root; writes OUT/validate-<id>/ (default results)")
    p.add_argument("--fail-fast", action="store_true", help="stop after the first check with a FAIL (the rest SKIP)")
    p.add_argument("--keep-going", action="store_true",
                   help="after a host fails preflight, still check the others (default: stop there, in seconds)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")


def main(args: Namespace) -> int:
    from bench import references

    if not args.hostfile:
        raise BadInput("--hostfile: bench validate needs the hostfile of the cluster to check")
    resources = hostfile.resources_from_args(args)
    table = references.load(args.reference)
    if args.junit:
        try:
            open(args.junit, "a").close()
        except OSError as e:
            raise BadInput(f"--junit: cannot write {args.junit!r} ({e.strerror})") from None
    run_id = results.new_run_id(args.out, prefix="validate-")
    vdir = os.path.abspath(os.path.join(args.out, run_id))
    v = Validation(args, resources, LEVELS[args.level], table, vdir)
    t0 = time.time()
    from bench import validate_checks as stages

    stop_why = None
    for stage in (stages.preflight, stages.inventory, stages.throughput, stages.bandwidth, stages.training,
                  stages.stragglers, stages.scaling):
        if stop_why is None and args.fail_fast and v.failed():
            stop_why = "--fail-fast: not run after a FAIL"
        if stop_why:
            stages.skip_rest(v, stage, stop_why)
            continue
        stage(v)
        if stage is stages.preflight and v.failed() and not args.keep_going:
            # The cluster as given cannot pass; say so in seconds, with the way on.
            lost = [h for h in v.resources if h not in v.good]
            stop_why = (f"not run: {', '.join(lost)} failed preflight; fix it, or rerun with --exclude "
                        f"{'@'.join(lost)} (or --keep-going to check the rest now)")
            print(f"bench validate: {stop_why}", file=sys.stderr)
    rec = record(v, run_id, time.time() - t0)
    results.append(os.path.join(vdir, "results.jsonl"), rec)
    if args.junit:
        from bench.junit import write

        write(args.junit, rec["checks"], duration_s=rec["duration_s"])
    if args.json:
        print(json.dumps(rec))
    else:
        render(rec)
    return EXIT_FAILED if rec["result"] == "FAIL" else 0


def record(v: Validation, run_id: str, duration: float) -> dict[str, Any]:
    statuses = [c.status for c in v.checks]
    verdict = "FAIL" if "FAIL" in statuses else "WARN" if "WARN" in statuses else "PASS"
    failed_hosts = sorted({c.node for c in v.checks if c.status == "FAIL" and c.node != CLUSTER})
    return results.make_record(
        "validate", "failed" if verdict == "FAIL" else "ok", run_id=run_id, run_dir=v.vdir, duration_s=duration,
        result=verdict, level=v.args.level, hosts=list(v.resources), device=v.device, failed_hosts=failed_hosts,
        counts={s: statuses.count(s) for s in ("PASS", "WARN", "FAIL", "SKIP")},
        checks=[asdict(c) for c in v.checks], measured=v.figures, runs=v.runs, reference_table=v.table.path)


_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def render(rec: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console()
    c = rec["counts"]
    title = (f"bench validate {rec['run_id']} ({rec['level']}, {len(rec['hosts'])} host(s), {rec['device']}): "
             f"{rec['result']} — {c['FAIL']} FAIL, {c['WARN']} WARN, {c['PASS']} PASS, {c['SKIP']} SKIP")
    table = Table(title=Text(title), title_justify="left")
    for col in ("check", "node", "status", "value", "reference", "reason"):
        table.add_column(col, overflow="fold")
    for ch in rec["checks"]:
        table.add_row(Text(ch["check"]), Text(ch["node"]), Text(ch["status"], style=_STYLE[ch["status"]]),
                      Text(ch["value"]), Text(ch["reference"]), Text(ch["reason"]))
    out.print(table)
    for s in rec["measured"].get("stragglers", [])[:1]:
        out.print(Text(f"straggler: {s['kind']} {s['host']}{'' if s['slot'] is None else ':' + str(s['slot'])} costs "
                       f"{s['cost']:.1%} of the cluster's throughput; to drop it: --exclude {s['exclude']}"))
    if rec["failed_hosts"]:
        out.print(Text(f"failed: {', '.join(rec['failed_hosts'])}; to run without them: --exclude "
                       f"{'@'.join(rec['failed_hosts'])}", style="bold red"))
    print(f"results: {os.path.join(rec['run_dir'], 'results.jsonl')}", file=sys.stderr)


def run_one(v: Validation, hosts: dict[str, list[int]], steps: int) -> dict[str, Any]:
    """A short training run on these hosts/slots, recorded as `bench run` records it.

    bench.runner.run without its preflight and probe (done once here, not
    once per node). Failures come back as a failed dict, never raised.
    """
    from bench import runner

    cfg = v.run_config(list(hosts), steps)
    inventory = [v.inventory[h] for h in hosts if h in v.inventory]
    try:
        return runner.run(cfg, v.run_args(hosts), quiet=True,
                          inspected=(inventory, v.figures.get("verdict") or {}))
    except (RunFailed, BadInput) as e:
        return {"status": "failed", "error": {"where": "bench run", "reason": str(e).splitlines()[0]}}
