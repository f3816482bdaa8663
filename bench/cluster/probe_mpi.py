"""MPI entry of `bench probe --launcher openmpi`: each rank takes its node's inventory; rank 0 prints all.

    mpirun -n N --hostfile H python -m bench.cluster.probe_mpi [--health --since S --dcgm N ...]

The health options are `bench probe`'s own (bench.cluster.inventory.HealthAsk.argv).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    import argparse

    from mpi4py import MPI

    from bench.cluster.inventory import HealthAsk, ProbeConfig
    from bench.cluster.probe import local_inventory
    from bench.core.options import add_options, from_args

    p = argparse.ArgumentParser(prog="bench.cluster.probe_mpi")
    add_options(p, ProbeConfig)
    cfg = from_args(ProbeConfig, p.parse_args(argv))
    ask: HealthAsk | None = cfg.health_ask()
    comm = MPI.COMM_WORLD
    everything = comm.gather(local_inventory(health=ask), root=0)
    if comm.Get_rank() == 0:
        print(json.dumps(everything), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
