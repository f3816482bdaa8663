"""Before launch: can every host run the same software as this one?

    from bench.cluster.preflight import check_or_raise
    check_or_raise(["node1", "node2", "node3"])   # RunFailed names every bad host

DeepSpeed's launcher checks ssh on the first host only; a typo'd host, a
node without the venv, or one with another DeepSpeed then fails minutes
later inside a rank, or hangs. Here every host is reached in parallel with
a deadline and runs this machine's interpreter (``sys.executable``, the same
path: clusters share the install, or the image) on a torch-free script that
prints its hostname, Python and package versions. Failures read like

    preflight: 10.77.0.3: unreachable (ssh: connect to host 10.77.0.3 port 22: No route to host)
    preflight: node2: deepspeed 0.19.7 != 0.19.8 here
    preflight: node3: /shared/results is not the directory bench wrote (not shared storage?)
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import shared_dir
from bench.cluster.remote import NOT_FOUND, HostResult, run_on_hosts
from bench.core.errors import RunFailed

PACKAGES = ("vitbench", "torch", "torchvision", "deepspeed", "timm")

# Imports nothing heavy: answers in ~50 ms even where torch takes seconds. With
# two arguments (a nonce file's path and its nonce) it also says whether the
# results root is shared (bench.cluster.shared_dir).
PROBE_CODE = f"""\
import importlib.metadata as md, json, platform, socket, sys
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
{shared_dir.ANSWER_SOURCE}
out = {{"hostname": socket.gethostname(), "python": platform.python_version(),
       "versions": {{n: v(n) for n in {PACKAGES!r}}}}}
if len(sys.argv) == 3:
    out["run_dir"] = answer(sys.argv[1], sys.argv[2])
print(json.dumps(out))
"""


@dataclass
class HostCheck:
    """One host's answer; ``problems`` empty means it may take part."""

    host: str
    hostname: str | None = None
    python: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    unanswered: bool = False  # not reached, or no answer: nothing is known of the host (not that it is wrong)
    fs: dict | None = None    # what the results root is on this host (bench.cluster.shared_dir.mount_of)
    warnings: list[str] = field(default_factory=list)  # may take part, but a person should know

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        return f"preflight: {self.host}: {', '.join(self.problems)}"


def wait_s(via: str | None) -> float:
    """How long preflight waits for a host's answer: one ssh each, or (srun, mpirun) a step queued behind the
    allocation's others, daemons started: more than one ssh each."""
    return 15.0 if via in (None, "ssh") else 60.0


def inventory_wait_s(via: str | None) -> float:
    """How long validate's inventory waits for a node's probe, reached the way preflight reached it (`via`)."""
    return 30.0 if via in (None, "ssh") else 60.0


def probe_here(python: str | None = None) -> dict:
    """This machine's answer to PROBE_CODE, by the same code in a fresh interpreter."""
    proc = subprocess.run(
        [python or sys.executable, "-c", PROBE_CODE],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise RunFailed(f"preflight: this machine: probe failed: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _judge(r: HostResult, python: str, here: dict, run_root: str | None = None) -> HostCheck:
    check = HostCheck(r.host, elapsed=r.elapsed)
    # Run directly (a local host), a missing interpreter is an OSError, not rc 127.
    missing_here = r.error is not None and r.error.startswith(f"{python}:")
    if r.error is not None and not missing_here:
        check.problems.append(f"unreachable ({r.error})")
        check.unanswered = True
        return check
    if missing_here or r.rc == NOT_FOUND:
        check.problems.append(f"python missing ({python} not found there)")
        return check
    if r.rc != 0:
        check.problems.append(f"probe failed (rc {r.rc}: {_last_line(r.stderr)})")
        check.unanswered = True
        return check
    try:
        there = json.loads(r.stdout.strip().splitlines()[-1])
        check.hostname, check.python = there["hostname"], there["python"]
        check.versions = dict(there["versions"])
    except (ValueError, KeyError, IndexError, TypeError):
        check.problems.append(f"probe printed no JSON ({_last_line(r.stdout or r.stderr)})")
        check.unanswered = True
        return check
    if run_root is not None:
        shared = shared_dir.problem(there.get("run_dir"), run_root)
        if shared:
            check.problems.append(shared)
        check.fs = (there.get("run_dir") or {}).get("fs")
        warning = shared_dir.fs_warning(check.fs)
        if warning:
            check.warnings.append(warning)
    if check.python != here["python"]:
        check.problems.append(f"python {check.python} != {here['python']} here")
    for name in PACKAGES:
        theirs, ours = check.versions.get(name), here["versions"].get(name)
        if theirs == ours:
            continue
        if theirs is None:
            check.problems.append(f"{name} missing ({ours} here)")
        elif ours is None:
            check.problems.append(f"{name} {theirs} != none here")
        else:
            check.problems.append(f"{name} {theirs} != {ours} here")
    return check


def preflight(
    hosts: list[str],
    timeout: float = 15.0,
    env: dict[str, str] | None = None,
    python: str | None = None,
    container_exec: str | None = None,
    run_root: str | None = None,
    via: str = "ssh",
) -> list[HostCheck]:
    """Check every host in parallel; one HostCheck per host, in host order.

    ``python`` is the interpreter to run there (default: this one's path);
    ``env`` is the local environment for ssh (see bench.cluster.remote.run_on_hosts).
    ``run_root``: the results root (--out), which every host must see as the
    same writable directory (bench.cluster.shared_dir).
    ``via``: "ssh" (one ssh per host), "srun" (one srun step over the nodes,
    inside a Slurm allocation) or "mpirun" (one MPI rank per host).
    A host that does not answer is named after at most ``timeout`` seconds.
    Raises ValueError for a host name that must not reach ssh.
    """
    from bench.cluster.container import remote_python

    # Inside a container (or with --container-exec) the hosts run the image's
    # python, with the results root bound in as the ranks will have it.
    argv = [python] if python else remote_python(container_exec, bind=run_root)
    here = probe_here()

    def ask(args: list[str]) -> dict[str, HostResult]:
        if via == "srun":
            from bench.cluster.probe_launch import srun_per_node
            return srun_per_node(list(dict.fromkeys(hosts)), [*argv, "-c", PROBE_CODE, *args], timeout, env)
        if via == "mpirun":
            from bench.cluster.probe_launch import mpirun_per_node
            return mpirun_per_node(list(dict.fromkeys(hosts)), [*argv, "-c", PROBE_CODE, *args], timeout, env)
        return run_on_hosts(hosts, [*argv, "-c", PROBE_CODE, *args], timeout=timeout, env=env)

    if run_root is None:
        results = ask([])
    else:
        with shared_dir.planted(run_root) as (path, nonce):
            results = ask([path, nonce])
    return [_judge(results[h], " ".join(argv), here, run_root) for h in dict.fromkeys(hosts)]


def check_or_raise(hosts: list[str], **options: Any) -> list[HostCheck]:
    """preflight(hosts, **options) (its keywords and defaults), raising RunFailed with one line per failing host."""
    checks = preflight(hosts, **options)
    failing = [c for c in checks if not c.ok]
    if failing:
        raise RunFailed("\n".join(c.message() for c in failing))
    return checks
