"""`bench hosts`: the hosts and slots a hostfile and its filters resolve to.

    bench hosts --hostfile hostfiles/tesla
    bench hosts --hostfile hostfiles/tesla --exclude tesla-node5 --json
    bench hosts --hostfile hostfiles/vector --gpus 1
    bench hosts                     # this machine: its GPUs as their backend lists them, else 1 CPU slot

It reads files only (and asks the GPU backend's tool without --hostfile): no ssh,
no torch, so it answers at once and shows what a run would use before any
launch.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.cluster.hostfile import HostSelection
from bench.cluster import accel
from bench.commands.common import add_json_flag
from bench.core.options import add_options, from_args

HELP = "show the hosts and slots a hostfile with --include/--exclude/--num-nodes resolves to"


def local_slot_count() -> tuple[int, str, bool]:
    """(slots of this machine, how they were found, whether the GPU vendor's tool failed).

    GPUs as the accelerator backend's tool lists them (bench.cluster.accel); 1 slot (a CPU rank)
    without the tool or when it fails, because a driverless node can still run the CPU benchmark.
    """
    d = accel.local_detection()
    if d.count == 0:
        return 1, f"{d.how}: 1 {'CPU ' if d.missing else ''}slot", d.failed
    return d.count, d.how, d.failed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, HostSelection)
    add_json_flag(parser)


def main(args: argparse.Namespace) -> int:
    hosts = from_args(HostSelection, args)
    local = None
    source = hosts.hostfile
    if hosts.hostfile is None:
        n, how, failed = local_slot_count()
        local = {"localhost": n}
        source = f"this machine ({how})"
        if failed:
            print(f"bench hosts: {how}", file=sys.stderr)
    resources = hosts.resources(local_hosts=local)
    assert resources is not None  # local_hosts given or --hostfile parsed
    if args.json:
        print(json.dumps({"resources": resources, "hostfile": hosts.hostfile, "nodes": len(resources),
                          "world_size": sum(len(s) for s in resources.values())}))
        return 0
    from bench.render.hosts import render
    render(str(source), resources)
    return 0
