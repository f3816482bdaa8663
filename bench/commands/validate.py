"""`bench validate`: an acceptance test of a cluster, check by check, node by node.

    bench validate --hostfile hostfiles/vector                        # quick: minutes
    bench validate --hostfile hostfiles/vector --level full --junit validate.xml
    bench validate --hostfile hostfiles/tesla --reference my_refs.json --json

The checks and their order are bench.experiments.validate's. Exit 0: no
FAIL (WARNs allowed, shown); 1: a FAIL; 2: bad input. --json prints one
document (the "validate" record); --junit FILE writes one JUnit test case
per check per node.
"""

from __future__ import annotations

import json

from bench.cluster.hostfile import HostSelection
from bench.commands.common import add_json_flag, add_metrics_flag, check_metrics_file, write_metrics
from bench.core.errors import EXIT_FAILED
from bench.core.options import add_options, from_args
from bench.experiments.validate import validate
from bench.experiments.validation import ValidateConfig

HELP = "acceptance-test a cluster: preflight, inventory, per-node throughput, bandwidth, a DP run, stragglers, scaling"


def add_arguments(p) -> None:
    add_options(p, ValidateConfig)
    add_options(p, HostSelection, skip=("num_gpus",))
    add_json_flag(p)
    add_metrics_flag(p)


def main(args) -> int:
    cfg = from_args(ValidateConfig, args)
    check_metrics_file(args.metrics_file)
    rec = validate(cfg, from_args(HostSelection, args))
    write_metrics(args.metrics_file, rec)
    if cfg.junit:
        from bench.render.junit import write
        write(cfg.junit, rec["checks"], duration_s=rec["duration_s"])
    if args.json:
        print(json.dumps(rec))
    else:
        from bench.render.validate import render
        render(rec)
    return EXIT_FAILED if rec["result"] == "FAIL" else 0
