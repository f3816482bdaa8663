"""Which signal killed a rank, from what its node's launcher said: a rank killed by a signal writes nothing itself.

    signals(run_dir, ranks)   # {rank: "SIGKILL"} from logs/launcher.log

The launchers' own words (DeepSpeed 0.19.8's launch.py under local and pdsh,
Open MPI 4.1's mpirun, Slurm 22.05's srun), read from the log bench keeps of
the runner's output:

  launch.py  `process 4242 spawned with command: [...]` then `[...] exits with return code = -9`
             (pdsh prefixes each line with its host): the PID is the rank's own, as it recorded it.
             Only a node that runs one rank says which: launch.py 0.19.8 prints the last command it
             spawned and the first failure it saw (tried: a SIGKILLed local_rank=1 printed as
             "local_rank=1 ... exits with return code = 1", rank 0's echo), so with several ranks on
             a node nothing is claimed
  mpirun     `mpirun noticed that process rank 1 with PID 4242 on node node2 exited on signal 9 (Killed).`
  srun       `srun: error: node2: task 1: Killed` (the task is the rank; the text is strsignal's)
"""

from __future__ import annotations

import os
import re
import signal

_LINE_HOST = re.compile(r"^(?P<host>[^\s:\[]+): (?P<rest>.*)$")  # pdsh's "host: " prefix
_SPAWNED = re.compile(r"process (?P<pid>\d+) spawned with command: (?P<cmd>\[.*\])\s*$")
_EXITED = re.compile(r"(?P<cmd>\['.*\]) exits with return code = (?P<rc>-?\d+)\s*$")  # past the log's "[time]"
_MPIRUN = re.compile(r"process rank (?P<rank>\d+) with PID (?P<pid>\d+) on node (?P<node>\S+) exited on signal "
                     r"(?P<sig>\d+)")
_SRUN = re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+?)\s*$")
_MAX_BYTES = 32 << 20  # the runner's own output only (ranks log to their own files): small


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
    """{rank: signal name} for the ranks the lines say a signal ended; ranks: (rank, hostname, pid) recorded."""
    rank_of_pid: dict[int, list[int]] = {}
    for rank, _, pid in ranks:
        rank_of_pid.setdefault(pid, []).append(rank)
    spawned: dict[tuple[str, str], int] = {}
    per_node: dict[str, int] = {}
    out: dict[int, str] = {}
    words = _by_text()
    for raw in lines:
        line = raw.rstrip("\n")
        m = _LINE_HOST.match(line)
        host, rest = (m["host"], m["rest"]) if m else ("", line)
        if (s := _SPAWNED.search(rest)) is not None:
            spawned[(host, s["cmd"])] = int(s["pid"])
            per_node[host] = per_node.get(host, 0) + 1
        elif (e := _EXITED.search(rest)) is not None and int(e["rc"]) < 0 and per_node.get(host) == 1:
            pid = spawned.get((host, e["cmd"]))
            matches = rank_of_pid.get(pid, []) if pid is not None else []
            if len(matches) == 1:  # the same PID on two hosts: not this line's to say which
                out.setdefault(matches[0], name(-int(e["rc"])))
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
