"""Run one argument list on many hosts at once, each with a deadline.

    from bench.cluster.remote import run_on_hosts
    results = run_on_hosts(["node1", "node2"], ["hostname", "-f"], timeout=15)
    for host, r in results.items():
        print(host, r.rc, r.error or r.stdout.strip())

Remote hosts are reached with ``ssh -o BatchMode=yes ... HOST -- CMD``; the
local machine (localhost, 127.x, ::1, this hostname) runs the argv directly.
Every command runs in its own session, so a timeout kills exactly the process
group we started, by PID (never ``pkill -f``, which DeepSpeed's pdsh runner
uses and which hits anything whose command line matches).

A timeout ends the local ssh client; a remote command that ignores its
closed connection (no tty, so no SIGHUP) runs on until it ends by itself.
Stop long-running remote work by the PIDs it reports, not by name.
"""

from __future__ import annotations

import ipaddress
import os
import resource
import shlex
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.cluster.hostnames import validate_hostname

# ssh exits 255 for its own failures (connect, auth, host key); the remote
# command's status comes back unchanged otherwise.
SSH_FAILED = 255
# A shell answers 127 when the command is not there.
NOT_FOUND = 127
_MAX_THREADS = 256
FDS_PER_CHILD = 6  # a child's stdout and stderr pipes, both ends while it starts, and its pidfd/select slack
# After the kill, how long to wait for the pipes to close; a grandchild that
# left our process group (setsid) may hold them open for ever.
_DRAIN_S = 2.0


@dataclass
class HostResult:
    """What one host answered. ``error`` is one line when it did not run or finish."""

    host: str
    rc: int | None
    stdout: str
    stderr: str
    elapsed: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.rc == 0


def host_problem(host: str) -> str | None:
    """Why ``host`` must not reach ssh, or None.

    bench.cluster.hostnames has the last word; the leading '-' check comes
    first regardless, because a host '-oProxyCommand=...' would make ssh run
    a command of the hostfile's author.
    """
    if not host:
        return "empty host name"
    if host.startswith("-"):
        return f"host name starts with '-': {host!r}"
    if any(c.isspace() or not c.isprintable() for c in host):
        return f"host name has whitespace or control characters: {host!r}"
    return validate_hostname(host)


def ssh_argv(host: str, argv: list[str], connect_timeout: int = 5) -> list[str]:
    """The ssh command that runs ``argv`` on ``host``.

    The remote side hands the command to a shell, so it is one
    ``shlex.join``-quoted word: arguments with spaces or ``;`` arrive unsplit
    and uninterpreted. The host goes before ``--`` because ssh parses options
    again after the host name; nothing after ``--`` is read as an option.
    """
    problem = host_problem(host)
    if problem is not None:
        raise ValueError(f"refusing host {host!r}: {problem}")
    if not argv:
        raise ValueError("empty command")
    return [
        "ssh",
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={connect_timeout}",
        # A fresh cluster's keys are unknown; BatchMode would refuse them all.
        "-o", "StrictHostKeyChecking=accept-new",
        host,
        "--",
        shlex.join(argv),
    ]  # fmt: skip


def _local_names() -> set[str]:
    name = socket.gethostname()
    names = {"localhost", "localhost.localdomain", name.lower(), name.split(".")[0].lower()}
    try:
        names.add(socket.getfqdn().lower())
    except OSError:
        pass
    return names


def is_local(host: str) -> bool:
    """True for this machine: run directly, no ssh."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() in _local_names()


def _ssh_error(stderr: str) -> str:
    """ssh's own complaint as one line, e.g. 'ssh: connect to host h port 22: ...'."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    # Warnings ("Permanently added ...") come first; the failure is last.
    line = lines[-1] if lines else "ssh failed with no message"
    return line if line.startswith("ssh:") else f"ssh: {line}"


def _kill_group(proc: subprocess.Popen) -> None:
    # start_new_session=True made the child a group leader: its PID is the PGID.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_one(
    host: str,
    cmd: list[str],
    via_ssh: bool,
    timeout: float,
    env: dict[str, str] | None,
    started: list[subprocess.Popen],
) -> HostResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        return HostResult(host, None, "", "", time.monotonic() - start, f"{cmd[0]}: {e.strerror}")
    started.append(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=_DRAIN_S)
        except subprocess.TimeoutExpired:
            # Someone outside the group holds our pipes; give up on the output.
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
            out, err = "", ""
        return HostResult(host, None, out, err, time.monotonic() - start, f"timeout after {timeout:g}s")
    elapsed = time.monotonic() - start
    error = _ssh_error(err) if via_ssh and proc.returncode == SSH_FAILED else None
    return HostResult(host, proc.returncode, out, err, elapsed, error)


def run_on_hosts(
    hosts: list[str],
    argv: list[str],
    timeout: float = 15.0,
    env: dict[str, str] | None = None,
) -> dict[str, HostResult]:
    """Run ``argv`` on every host in parallel; results keyed by host, in host order.

    ``env`` is the environment of the local process (the ssh client, or the
    command itself on this machine), not one sent to the remote side: pass
    a PATH whose ``ssh`` carries a config, for example. A host that does not
    finish within ``timeout`` seconds gets rc None and error 'timeout after Ns'.
    Raises ValueError for a host name that must not reach ssh, before
    anything runs.
    """
    connect_timeout = max(1, min(5, int(timeout)))
    plans: list[tuple[str, list[str], bool]] = []
    for host in hosts:
        if is_local(host):
            plans.append((host, list(argv), False))
        else:
            plans.append((host, ssh_argv(host, argv, connect_timeout), True))
    if not plans:
        return {}
    # Each ssh at once holds its pipes here: 256 of them is near the usual soft limit of 1,024.
    raise_open_files(FDS_PER_CHILD * min(len(plans), _MAX_THREADS) + 64)
    started: list[subprocess.Popen] = []
    with ThreadPoolExecutor(max_workers=min(len(plans), _MAX_THREADS)) as pool:
        futures = [pool.submit(_run_one, h, cmd, ssh, timeout, env, started) for h, cmd, ssh in plans]
        try:
            results = [f.result() for f in futures]
        except BaseException:
            # Ctrl-C reaches only this thread, and our children sit in their own
            # sessions, out of the terminal's reach: end them here, by PID.
            for proc in started:
                _kill_group(proc)
            raise
    return {r.host: r for r in results}


def raise_open_files(needed: int) -> int:
    """Raise this process's soft limit on open files to `needed` (at most the hard limit; never lowered), so the
    launcher it starts inherits it; the soft limit now. A cluster's usual 1,024 is what breaks pdsh past ~500 hosts,
    while the hard limit an unprivileged process may raise to is usually far higher."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return want
    return soft
