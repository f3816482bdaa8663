"""`bench probe`: every node's GPUs and libraries, and whether the cluster is uniform.

    bench probe                                   # this node
    bench probe --hostfile hostfiles/tesla        # every host, in parallel, over ssh (--launcher pdsh)
    bench probe --hostfile hostfiles/tesla --exclude tesla-node5 --precision fp16 --json
    bench probe --launcher slurm                  # inside an allocation: one srun task per slot

--launcher takes bench run's names and reaches the nodes as that launch
would (bench.launch's probe_via). With pdsh each host runs `<this python>
-m bench probe --local --json` (the same interpreter path, as on a shared
filesystem or in one image); openmpi and slurm start one task per slot; and
the answers are joined into one verdict (bench.cluster.hetero). Slots named
with --include host:0,1 limit the verdict to those GPUs; the inventory still
shows them all. Exit 0 when every host answered (whatever the verdict
says), 1 when one could not be probed (named on stderr), 2 for bad input.

Each node's inventory carries "interconnect": how its GPUs reach each other
and it reaches the other nodes, read from the GPUs' backend (their link
matrix and states), `ibstat` and sysfs (bench.cluster.probe says what exactly).
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.cluster.hetero import verdict
from bench.cluster.hostfile import HostSelection
from bench.cluster.inventory import ProbeConfig, probe_any, probe_resources, selected
from bench.cluster.probe import local_inventory
from bench.commands.common import add_json_flag
from bench.core.options import add_options, from_args
from bench.launch.registry import get

HELP = "inventory every node's GPUs, driver and libraries and flag a heterogeneous cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, HostSelection, skip=("num_gpus",))
    add_options(parser, ProbeConfig)
    add_json_flag(parser)


def main(args: argparse.Namespace) -> int:
    cfg, hosts = from_args(ProbeConfig, args), from_args(HostSelection, args)
    resources = probe_resources(cfg, hosts)
    if resources is None:
        nodes, unreachable = [local_inventory(with_torch=True if cfg.with_torch else None,
                                              health=cfg.health_ask())], {}
    else:
        # The launcher's own way to its nodes: pdsh over ssh, openmpi through mpirun, slurm through srun.
        nodes, unreachable = probe_any(get(cfg.launcher).probe_via, resources, cfg.timeout, cfg.with_torch,
                                       health=cfg.health_ask())
    v = verdict([selected(n) for n in nodes], cfg.precision, cfg.micro_batch, cfg.mem_per_sample_gb)
    for host, why in unreachable.items():
        # A verdict over the hosts that answered must not read OK for the cluster.
        v["findings"].append({"level": "fail", "code": "not-probed", "hosts": [host],
                              "message": f"{host} could not be probed ({why}): nothing is known of its GPUs"})
        v["level"] = "fail"
    if args.json:
        print(json.dumps({"nodes": nodes, "unreachable": unreachable, "verdict": v}))
    else:
        from bench.render.probe import render
        render(nodes, unreachable, v)
    for host, why in unreachable.items():
        print(f"bench probe: [{host}] not probed: {why}", file=sys.stderr)
    return 1 if unreachable else 0
