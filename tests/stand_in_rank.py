"""A rank for the node launcher's tests: writes the variables its launcher gave it, then does what its rank is told.

    python -m tests.stand_in_rank OUT_DIR [RANK=exit:N | RANK=kill:SIGNAME | RANK=sleep:S] ...
    python -m tests.stand_in_rank --run-dir OUT_DIR      # where a launch plan's bench.worker would run

No bench, torch or DeepSpeed in it: it stands where bench.worker runs, so that
tests/unit/test_node_launcher.py can start ranks in a fraction of a second.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def main(argv: list[str]) -> int:
    argv = [a for a in argv if not a.startswith("--local_rank=")]  # DeepSpeed's launch.py appends it
    argv = argv[1:] if argv[:1] == ["--run-dir"] else argv           # bench.launch.plan's argument for bench.worker
    out, orders = argv[0], dict(a.split("=", 1) for a in argv[1:])
    rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK", "?")  # mpirun's, under node --alone
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({k: os.environ.get(k) for k in NAMES}, f)
    what, _, value = orders.get(rank, "exit:0").partition(":")
    if what == "kill":
        os.kill(os.getpid(), signal.Signals[value])
    if what == "sleep":
        time.sleep(float(value))
    return int(value) if what == "exit" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
