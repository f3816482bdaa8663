"""Stop every rank one run started, on every host, by the PIDs the ranks recorded.

    python -m bench.launch.cleanup RUN_DIR   # on one host: kill that host's ranks of RUN_DIR (by hand, too)
    from bench.launch.cleanup import stop_ranks
    stop_ranks(run_dir)                  # here directly; every other host of plan.json over ssh

Each rank writes ranks/pid-<R> = "<hostname> <pid>" as it starts
(bench.worker.bootstrap), once, by rename. Stopping the launcher's process group ends pdsh, and
bench stops its ssh children by PID (bench.launch.strays), but a remote command has no tty and gets no SIGHUP:
its ranks run on, blocked in a collective, until their timeout. So bench
runs this module on each host over ssh, and it kills only PIDs from that
host's pid files whose /proc/PID/cmdline still names bench.worker and this
run dir (a PID may have been reused since). Never `pkill -f`: DeepSpeed's
pdsh runner does that on SIGTERM, and a pattern hits whatever matches it.

A host that cannot be reached is named (HostCleanup.error); its ranks end
by themselves when their collective timeout (plan.json collective_timeout_s)
expires, since they can reach no peer either.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field

# How long a SIGKILLed rank may take to leave the process table (it stays a
# zombie until its launcher reaps it, which counts as gone).
_GONE_WAIT_S = 3.0
REMOTE_TIMEOUT_S = 20.0


@dataclass
class HostCleanup:
    """What cleanup did on one host; error is one line when it could not run there."""

    host: str
    killed: list[int] = field(default_factory=list)
    error: str | None = None
    states: dict[int, str] = field(default_factory=dict)  # each killed PID's state just before: T = stopped


def rank_pids(run_dir: str) -> list[tuple[int, str, int]]:
    """(rank, hostname, pid) of every rank that recorded itself, in rank order: ranks/pid-<R> read by name for each
    rank of plan.json's world (never a listing: a network filesystem's client may list a stale directory)."""
    try:
        with open(os.path.join(run_dir, "plan.json")) as f:
            world = int(json.load(f).get("world_size") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        world = 0
    out = []
    for rank in range(world):
        try:
            with open(os.path.join(run_dir, "ranks", f"pid-{rank}")) as f:
                host, pid = f.read().split()
            out.append((rank, host, int(pid)))
        except (OSError, ValueError):
            continue
    return out


def is_our_rank(pid: int, run_dir: str) -> bool:
    """True if PID still runs a rank of this run (not a reused PID, not a zombie).

    Its argv holds the run dir as one argument (`--run-dir DIR`: run ids are
    unique) and a bench entry point: `-m bench.worker` (or another bench
    module), or the run dir's own entry script (slurm, which drops --module).
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    here = os.fsencode(os.path.abspath(run_dir))
    entry = any(a.startswith(b"bench.") or a.startswith(here + b"/") for a in argv)
    return here in argv and entry


_STATES = {"R": "running", "S": "sleeping", "D": "blocked in the kernel", "T": "stopped", "t": "stopped by a tracer",
           "Z": "a zombie"}


def process_state(pid: int, run_dir: str) -> str | None:
    """'T (stopped)' etc. from /proc/PID/stat, if PID still runs a rank of run_dir; else None."""
    if not is_our_rank(pid, run_dir):
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            letter = f.read().rsplit(")", 1)[1].split()[0]  # the command name may hold spaces and parentheses
    except (OSError, IndexError):
        return None
    return f"{letter} ({_STATES.get(letter, 'state ' + letter)})"


def kill_here(run_dir: str, hostname: str | None = None, states: dict[int, str] | None = None) -> list[int]:
    """SIGKILL this host's ranks of run_dir; returns the PIDs killed, once they are gone.

    states: filled with each one's process state just before (a SIGSTOPped rank is 'T (stopped)').
    """
    hostname = hostname or socket.gethostname()
    killed = []
    for _, host, pid in rank_pids(run_dir):
        if host != hostname or not is_our_rank(pid, run_dir):
            continue
        if states is not None:
            state = process_state(pid, run_dir)
            if state:
                states[pid] = state
        try:
            os.kill(pid, signal.SIGKILL)  # also ends a SIGSTOPped rank
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + _GONE_WAIT_S
    while time.monotonic() < deadline and any(is_our_rank(p, run_dir) for p in killed):
        time.sleep(0.05)
    return killed


def _plan_hosts(run_dir: str) -> list[str]:
    try:
        with open(os.path.join(run_dir, "plan.json")) as f:
            return list(json.load(f).get("resources", {}))
    except (OSError, ValueError, AttributeError):
        return []


def stop_ranks(run_dir: str, remote: bool = True, timeout: float = REMOTE_TIMEOUT_S,
               env: dict[str, str] | None = None, ended: set[int] | None = None) -> list[HostCleanup]:
    """Kill the run's ranks here, and (remote=True) on every other host of plan.json over ssh.

    ``env`` is the local environment of the ssh clients (see bench.cluster.remote). ``ended``: the ranks that
    told bench's hub they ended (or whose connection closed): where every rank that recorded a PID is among them,
    nothing is left to stop elsewhere and no host is reached (inside Slurm, with sshd stopped, an ssh to nodes
    whose ranks all ended said "stopped answering" in the run's error).
    """
    from bench.cluster.remote import is_local, run_on_hosts

    run_dir = os.path.abspath(run_dir)
    here = socket.gethostname()
    states: dict[int, str] = {}
    done = [HostCleanup(here, kill_here(run_dir, here, states), states=states)]
    others = [h for h in _plan_hosts(run_dir) if not is_local(h)]
    # Ranks that recorded another hostname live elsewhere; with none, no ssh is needed.
    recorded = rank_pids(run_dir)
    if not remote or not others or all(h == here for _, h, _ in recorded) or \
            (ended is not None and all(r in ended for r, _, _ in recorded)):
        return done
    try:
        answers = run_on_hosts(others, [*_remote_python(run_dir), "-m", "bench.launch.cleanup", run_dir],
                               timeout=timeout, env=env)
    except ValueError as e:  # a host name that must not reach ssh (validated long before)
        return [*done, HostCleanup(",".join(others), error=str(e))]
    for host, r in answers.items():
        if not r.ok:
            done.append(HostCleanup(host, error=r.error or f"rc {r.rc}: {r.stderr.strip()[-200:]}"))
            continue
        try:
            answer = json.loads(r.stdout.strip().splitlines()[-1])
            killed = answer["killed"]
            remote_states = {int(p): str(s) for p, s in (answer.get("states") or {}).items()}
        except (ValueError, KeyError, IndexError, AttributeError):
            killed, remote_states = [], {}
        done.append(HostCleanup(host, killed, states=remote_states))
    return done


def summary(done: list[HostCleanup]) -> dict:
    """For the record: {"killed": {host: [pids]}, "unreachable": {host: why}} (empty parts left out)."""
    out: dict = {}
    killed = {c.host: c.killed for c in done if c.killed}
    unreachable = {c.host: c.error for c in done if c.error}
    # Only the states that say something (a stopped or a kernel-blocked rank); keys are strings, as in JSON.
    states = {c.host: {str(p): s for p, s in c.states.items() if not s.startswith(("S ", "R "))} for c in done}
    states = {h: v for h, v in states.items() if v}
    if killed:
        out["killed"] = killed
    if unreachable:
        out["unreachable"] = unreachable
    if states:
        out["states"] = states
    return out


def _remote_python(run_dir: str) -> list[str]:
    """The run's own remote interpreter: through its container prefix when it had one."""
    from bench.cluster.container import remote_python

    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            container_exec = json.load(f).get("container_exec")
    except (OSError, ValueError):
        container_exec = None
    return remote_python(container_exec)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.launch.cleanup RUN_DIR", file=sys.stderr)
        return 2
    states: dict[int, str] = {}
    killed = kill_here(args[0], states=states)
    print(json.dumps(asdict(HostCleanup(socket.gethostname(), killed, states=states))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
