"""MPI entry of `bench probe --launcher openmpi`: each rank takes its node's inventory; rank 0 prints all.

    mpirun -n N --hostfile H python -m bench.cluster.probe_mpi
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from mpi4py import MPI

    from bench.cluster.probe import local_inventory

    comm = MPI.COMM_WORLD
    everything = comm.gather(local_inventory(), root=0)
    if comm.Get_rank() == 0:
        print(json.dumps(everything), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
