"""What starting one node's ranks costs before any rank runs: DeepSpeed's runner + launch.py, launch.py alone, and
bench's node launcher (bench.launch.node), each starting 2 stand-in ranks (tests/stand_in_rank.py: no torch).

    .venv/bin/python benchmarks/launcher_startup.py --rounds 5        # ~1 min on 2 cores

Each arm is timed from its start to its exit, with ranks that write their variables and exit at once, so the
figure is the launchers' own start-up and teardown (the imports of the ranks themselves are the same in every arm
and left out). Rounds interleave the arms (A B C, C B A, ...); the median per arm is printed with the load average.
Under pdsh the node launcher runs on every host of a launch, and DeepSpeed's runner once on the launching host.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO, load, machine, parse_smoke  # noqa: E402

WORLD = base64.urlsafe_b64encode(json.dumps({"localhost": [0, 1]}).encode()).decode()


def _arms(out: str) -> dict[str, list[str]]:
    py = sys.executable
    rank = ["tests.stand_in_rank", out]
    return {
        "deepspeed runner + launch.py": [py, "-u", "-m", "deepspeed.launcher.runner", "--hostfile",
                                         os.path.join(out, "no-hostfile"), "--num_gpus", "2", "--master_addr",
                                         "127.0.0.1", "--master_port", "29555", "--module", *rank],
        "deepspeed launch.py": [py, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={WORLD}",
                                "--master_addr=127.0.0.1", "--master_port=29555", "--module",
                                "--enable_each_rank_log=None", *rank],
        "bench.launch.node": [py, "-u", "-m", "bench.launch.node", f"--world-info={WORLD}",
                              "--master-addr=127.0.0.1", "--master-port=29555", *rank],
    }


def _time(argv: list[str]) -> float:
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv[3]} failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and not kept (the page cache)")
    args = parse_smoke(p, argv, dict(rounds=1, warmup_rounds=0))
    print(machine())
    with tempfile.TemporaryDirectory() as out:
        arms = _arms(out)
        names = list(arms)
        times: dict[str, list[float]] = {n: [] for n in names}
        loads = []
        for r in range(args.warmup_rounds + args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                took = _time(arms[n])
                if r >= args.warmup_rounds:
                    times[n].append(took)
            loads.append(load())
    for n in names:
        print(f"{n:30s} median {statistics.median(times[n]):5.2f} s  (min {min(times[n]):.2f}, "
              f"max {max(times[n]):.2f}, {len(times[n])} rounds)")
    print(f"load average (1 min) after each round: {', '.join(f'{x:.2f}' for x in loads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
