"""Which signal killed a rank, from what its node's launcher said: a rank killed by a signal writes nothing itself.

    signals(run_dir, ranks)   # {rank: "SIGKILL"} from logs/launcher.log

The launchers' own words (bench's node launcher under local and pdsh, Open
MPI 4.1's mpirun, Slurm 22.05's srun), read from the log bench keeps of the
launcher's output:

  node       `[bench.launch.node] rank 1 pid 4242 ended by SIGKILL` (pdsh prefixes each line with its
             host): every rank of the node, by the rank number the node launcher gave it
             (bench.launch.node; DeepSpeed's launch.py 0.19.8, which it replaced, printed the last
             command it spawned with the first failure it saw, so with several ranks on a node it
             could not be taken at its word)
  mpirun     `mpirun noticed that process rank 1 with PID 4242 on node node2 exited on signal 9 (Killed).`
  srun       `srun: error: node2: task 1: Killed` (the task is the rank; the text is strsignal's)
"""

from __future__ import annotations

import os
import re
import signal

_NODE = re.compile(r"\[bench\.launch\.node\] rank (?P<rank>\d+) pid (?P<pid>\d+) ended by (?P<sig>SIG[A-Z0-9]+|signal \d+)")
_MPIRUN = re.compile(r"process rank (?P<rank>\d+) with PID (?P<pid>\d+) on node (?P<node>\S+) exited on signal "
                     r"(?P<sig>\d+)")
_SRUN = re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+?)\s*$")
_MAX_BYTES = 32 << 20  # the launchers' own output only (ranks log to their own files): small


def name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _by_text() -> dict[str, str]:
    """strsignal's words ("Killed", "Segmentation fault") -> the signal's name: what srun prints."""
    out = {}
    for s in signal.Signals:
        text = signal.strsignal(s)
        if text:
            out[text.lower()] = s.name
    return out


def _tasks(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)])
    return out


def parse(lines: list[str], ranks: list[tuple[int, str, int]]) -> dict[int, str]:
    """{rank: signal name} for the ranks the lines say a signal ended; ranks: (rank, hostname, pid) recorded.

    A node launcher's line is taken when the rank recorded no PID or that same one."""
    pid_of = {rank: pid for rank, _, pid in ranks}
    out: dict[int, str] = {}
    words = _by_text()
    for raw in lines:
        line = raw.rstrip("\n")
        if (n := _NODE.search(line)) is not None:
            rank = int(n["rank"])
            if pid_of.get(rank, int(n["pid"])) == int(n["pid"]):
                out.setdefault(rank, n["sig"])
        elif (mp := _MPIRUN.search(line)) is not None:
            out.setdefault(int(mp["rank"]), name(int(mp["sig"])))
        elif (sr := _SRUN.search(line)) is not None and sr["what"].lower() in words:
            for task in _tasks(sr["tasks"]):
                out.setdefault(task, words[sr["what"].lower()])
    return out


def signals(run_dir: str, ranks: list[tuple[int, str, int]]) -> dict[int, str]:
    """parse() over logs/launcher.log of the run."""
    path = os.path.join(run_dir, "logs", "launcher.log")
    try:
        with open(path, "rb") as f:
            text = f.read(_MAX_BYTES).decode(errors="replace")
    except OSError:
        return {}
    return parse(text.splitlines(), ranks)
