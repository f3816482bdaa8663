"""The rank entry of `bench probe --launcher openmpi`: this node's inventory, one JSON line, and nothing else.

    mpirun -n N --hostfile H --tag-output python -m bench.cluster.probe_mpi [--health --since S --dcgm N ...]

The health options are `bench probe`'s own (bench.cluster.inventory.HealthAsk.argv). No MPI call: each rank
answers for its own node (bench.cluster.probe_launch reads the answers by mpirun's tags), so a node whose
Python cannot start leaves the others' answers whole. A gather at rank 0 (mpi4py) made every rank wait in
MPI_Init for one that had exited before it (Open MPI 4.1.4: tried, still waiting after 40 s).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    import argparse

    from bench.cluster.inventory import HealthAsk, ProbeConfig
    from bench.cluster.probe import local_inventory
    from bench.core.options import add_options, from_args

    p = argparse.ArgumentParser(prog="bench.cluster.probe_mpi")
    add_options(p, ProbeConfig)
    cfg = from_args(ProbeConfig, p.parse_args(argv))
    ask: HealthAsk | None = cfg.health_ask()
    print(json.dumps(local_inventory(health=ask)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
