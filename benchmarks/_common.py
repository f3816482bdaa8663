"""What the benchmarks share: thread and rank environment, interleaved A/B rounds, the machine line.

Import it before torch: it pins the thread count, which torch reads once.

Interleaving. Other work shares these cores, so a figure measured for one
arm and then for the other mixes the arms' difference with the change of
load. `interleave` runs one block of every arm per round, in forward order
on even rounds and reversed on odd ones (A B, B A, ...), which cancels a
linear drift; the ratio reported is the median of the per-round ratios,
each taken between blocks a few seconds apart.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


SMOKE_LINE = ("SMOKE RUN (--smoke): the smallest sizes, to show the script runs end to end; its figures are not "
              "results and no gate is judged")


def parse_smoke(parser: argparse.ArgumentParser, argv: list[str] | None, smallest: dict[str, object],
                what: str = "", banner: bool = True) -> argparse.Namespace:
    """parser's options plus --smoke, which makes `smallest` the defaults (an option given still wins).

    The suite runs every benchmark so (tests/multiproc/test_benchmarks_smoke.py), so a script cannot rot
    between the runs that measure; `what` says in --help what a smoke run leaves out, where it leaves a part.
    """
    sizes = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {x}")
                     for k, v in smallest.items() for x in (v if isinstance(v, list) else [v]))
    parser.add_argument("--smoke", action="store_true",
                        help=f"the suite's smoke run: {sizes}; seconds; its tables, figures not results, no gate "
                             f"judged{'; not run: ' + what if what else ''}")
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**smallest)
        args = parser.parse_args(argv)
        if banner:
            print(f"# {SMOKE_LINE}", flush=True)
    return args


def verdict(ok: bool, smoke: bool) -> str:
    """PASS or FAIL; a smoke run's one step of the smallest model says nothing of either."""
    return "not judged (smoke run)" if smoke else "PASS" if ok else "FAIL"


def pin_threads(threads: int = 1) -> None:
    """One compute thread per process (2 cores, shared): set before torch is imported."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not _has_gpu() else "cuda")
    # DeepSpeed JIT-builds ops (its shm op at init, which init_distributed below skips, as bench does). A cache
    # of their own: builds from other checkouts or containers sharing bench's cache rewrite it, and a benchmark
    # would wait on their lock or rebuild mid-measurement.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR",
                          os.path.join(os.path.expanduser("~"), ".cache", "vitbench", "torch_extensions-benchmarks"))


def _has_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl") and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


def init_distributed(backend: str) -> None:
    """deepspeed.init_distributed as bench's ranks call it (bench.worker.dist): without JIT-building DeepSpeed's
    CPU shared-memory all-reduce op, which only its inference all-reduce uses. Building it cost the first
    benchmark of a clean checkout about 50 s on 2 cores (seen here), in a setup bench's own ranks never run."""
    import deepspeed

    from bench.worker.dist import _skip_shm_comm_build

    _skip_shm_comm_build()
    deepspeed.init_distributed(dist_backend=backend)


def single_rank_env() -> None:
    """torch.distributed variables for a world of one (DeepSpeed needs a process group)."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def interleave(arms: dict[str, Callable[[], float]], rounds: int, *, warmup_rounds: int = 1,
               log: Callable[[str], None] = print) -> dict[str, list[float]]:
    """Run every arm once per round, alternating the order; each call returns images/s of one block.

    The first `warmup_rounds` rounds are run and printed but not kept.
    """
    names = list(arms)
    kept: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup_rounds + rounds):
        order = names if r % 2 == 0 else names[::-1]
        row = {}
        for n in order:
            row[n] = arms[n]()
            if r >= warmup_rounds:
                kept[n].append(row[n])
        tag = "warm-up" if r < warmup_rounds else f"round {r - warmup_rounds + 1}"
        log(f"  {tag:>8}: " + "  ".join(f"{n} {row[n]:8.2f}" for n in names) + f"  (load {load():.1f})")
    return kept


def interleave_runs(argvs: dict[str, list[str]], rounds: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """A whole `bench run` per arm (name -> its argv) and round, interleaved with no warm-up round (each run warms
    up itself): each arm's images/s per round, and its last run's record."""
    last: dict[str, dict] = {}

    def arm(name: str) -> Callable[[], float]:
        def run() -> float:
            last[name] = bench_run(name, argvs[name])
            return last[name]["figures"]["images_per_s"]
        return run

    kept = interleave({a: arm(a) for a in argvs}, rounds, warmup_rounds=0)
    return kept, last


def print_rounds(kept: dict[str, list[float]]) -> None:
    """The closing lines: each arm's figure per round, and the load average at the end."""
    print("# per round: " + "; ".join(f"{a} " + ", ".join(f"{x:.1f}" for x in xs) for a, xs in kept.items()))
    print(f"# load avg at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median of per-round ratios num[i] / den[i]."""
    return statistics.median(a / b for a, b in zip(num, den))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def load() -> float:
    return os.getloadavg()[0]


def save_json(path: str | None, data: object) -> None:
    """--json FILE: what the benchmark measured, written there too (nothing where no FILE was given)."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)


def machine() -> str:
    """One line: when, where, what; the load average tells a reader how busy the cores were."""
    versions = _versions()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    gpu = ""
    if "torch" in sys.modules or _has_gpu():
        try:
            import torch
            if torch.cuda.is_available():
                gpu = f", GPU {torch.cuda.get_device_name(0)}"
        except ImportError:
            pass
    return (f"{datetime.datetime.now().astimezone().isoformat(timespec='minutes')} {platform.node()}: "
            f"{os.cpu_count()} cores ({model}){gpu}, load avg {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
            f"python {platform.python_version()}, {versions}")


def _versions() -> str:
    """torch's and DeepSpeed's versions: from the modules where this process imported them, else from the
    installed files. Importing both only to print them cost a script that launches its ranks 3-5 s of a core."""
    import importlib.metadata
    import importlib.util
    import re

    def version(name: str) -> str:
        if name in sys.modules:
            return sys.modules[name].__version__
        spec = importlib.util.find_spec(name)  # finds the package without running it
        if spec is None or not spec.origin:
            raise ImportError(name)
        # torch's local tag (+cu130: which CUDA it was built for) is in its version.py, not in the metadata.
        with contextlib.suppress(OSError):
            with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
                if m := re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", f.read(), re.M):
                    return m[1]
        return importlib.metadata.version(name)

    try:
        return f"torch {version('torch')}, deepspeed {version('deepspeed')}"
    except ImportError:
        return "torch not installed"


class Timer:
    """Wall clock and this process's CPU time of a block, synchronising the device at both ends.

    On a CPU run with one thread, CPU time is the work the block did whatever
    else the cores were doing; wall clock is what a user waits, and moves with
    the load of other work.
    """

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        self.sync = sync
        self.seconds = self.cpu_seconds = 0.0

    def __enter__(self) -> "Timer":
        self.sync()
        self._t, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sync()
        self.seconds = time.perf_counter() - self._t
        self.cpu_seconds = time.process_time() - self._c


def bench_run(name: str, argv: list[str]) -> dict:
    """One whole `bench run ARGV --json` of arm `name`: its record; a failed run stops the benchmark, naming it."""
    p = subprocess.run([sys.executable, "-m", "bench", "run", *argv, "--json"], capture_output=True, text=True,
                       cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"{name}: bench run failed ({p.returncode}): {p.stdout[-1500:]} {p.stderr[-1500:]}")
    return json.loads(p.stdout)
