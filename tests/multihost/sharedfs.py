"""A real network filesystem for the namespace hosts: one SFTP server, an sshfs client per host and one for the head.

    with shared_fs(cluster) as fs:                    # as root; netns.build_cluster's hosts
        share = fs.share("nfs")                       # PROFILES, or fs.share("hour", HOUR_LISTINGS)
        share.bench("--hostfile", ..., "--out", share.out("run"), env=cluster.env)
        subprocess.Popen([*fs.head_argv(), sys.executable, "-m", "bench", ...])  # bench's own PID

Layout: ``socat TCP-LISTEN:PORT,bind=<bridge addr>,fork EXEC:sftp-server``
in the root namespace serves a real directory of this machine, ``root``
(``/tmp/vbt<pytest pid>shared-*``, so netns.clean_stale removes a crashed
run's). Each share is a directory ``root/<name>`` that every client mounts
over the same path, with its own cache options (``sshfs -f -o
directport=PORT,OPTS``, no ssh): the hosts in their sshd's mount namespace
(the one ``ip netns exec`` made for it: new sessions, so every rank, see the
mount; this machine's root namespace never does), the head in the mount
namespace of a holder process (``unshare --mount --propagation private``)
that bench is run in with ``nsenter``, so the head is one client for the
whole session, its caches kept between commands like a login node's. A
slurmd started with its own mount namespace (slurm.build_slurm(own_mount_ns=
True)) is added with ``fs.add_slurm(s)``. Every mount is its own client with
its own caches; the test process itself reads ``root`` directly (what the
server wrote), never through a cache.

Profiles (sshfs's own caches plus FUSE's): "nfs", a default Linux NFS mount
(listings fresh, attributes 3 s, negative lookups 60 s); "strict", listings,
attributes and negative lookups all 30 s. HOUR_LISTINGS: the "nfs" profile
with listings cached for an hour, so no client ever sees another's new files
by listing, and a name looked up as missing stays missing 60 s.

The server's log (sftp-server ``-l LEVEL``; DEBUG3 names every request)
goes to ``root/../sftp.log`` one line per message with the time it arrived
(benchmarks/shared_dir_ops.py counts them). Teardown, also on failure:
``fusermount -u -z`` in the namespace that mounted, then each sshfs, the
holder and socat (its children first) by PID.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .netns import Cluster, _kill_pids, _pid_alive

SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PROFILES = {
    "nfs": "dcache_dir_timeout=0,dcache_stat_timeout=3,entry_timeout=60,negative_timeout=60,attr_timeout=3",
    "strict": "dir_cache=yes,dcache_timeout=30,entry_timeout=30,negative_timeout=30,attr_timeout=30",
}
# "nfs" but for its listings: one validate asks both questions (tests/multihost/test_shared_dir.py), that no listing
# is relied on and that no lookup made before a file existed is. A bench that lists nothing sees "nfs" here.
HOUR_LISTINGS = ("dir_cache=yes,dcache_dir_timeout=3600,dcache_stat_timeout=3,entry_timeout=60,negative_timeout=60,"
                 "attr_timeout=3")
MOUNT_TIMEOUT_S = 10.0
STALE_RE = re.compile(r"/vbt(\d+)shared-")


def _descendants(pid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
                    out += [int(child), *_descendants(int(child))]
    return out


def clean_stale() -> list[int]:
    """End (by PID) the sshfs and socat processes of runs whose pytest is gone; their PIDs."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace")
            m = STALE_RE.search(argv)
            comm = Path(f"/proc/{d}/comm").read_text().strip()
            if m and comm in ("sshfs", "socat", "sftp-server") and not _pid_alive(int(m[1])):
                pids.append(int(d))
    _kill_pids(pids)
    return pids


@dataclass
class Mount:
    """One client: an sshfs (its PID) over `path`, in the mount namespace of the client `where`."""

    where: str  # "head", a host's address, or "slurmd:nodeN"
    path: str
    proc: subprocess.Popen


@dataclass
class Share:
    """A directory every client mounts with the same options; `path` is the same on all of them."""

    fs: SharedFS
    name: str
    path: str
    opts: str
    _n: int = 0

    @property
    def cluster(self) -> Cluster:
        return self.fs.cluster

    def out(self, what: str = "out") -> str:
        """A fresh path on the share for one command's --out (not made: bench makes it through the head's mount)."""
        self._n += 1
        return f"{self.path}/{what}-{self._n}"

    def bench(self, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        """`python -m bench ARGS` on the head (its own mount), as tests/conftest.bench runs it."""
        proc = self.popen(*args, env=env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """The same, started: the Popen's PID is bench's own (for SIGINT, SIGKILL); text stdout/stderr pipes."""
        full_env = dict(self.fs.cluster.env if env is None else env)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        return subprocess.Popen([*self.fs.head_argv(), sys.executable, "-m", "bench", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=full_env)


@dataclass
class SharedFS:
    cluster: Cluster
    root: Path
    port: int
    server: subprocess.Popen
    holder: subprocess.Popen  # the head's mount namespace
    log: Path
    shares: dict[str, Share] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    # Every client: (where, the PID whose mount namespace it mounts in, the network namespace or None).
    clients: list[tuple[str, int, str | None]] = field(default_factory=list)

    def head_argv(self, cwd: str | None = None) -> list[str]:
        """The argv prefix that runs a command in the head's mount namespace; nsenter execs, so the PID is the
        command's own."""
        return ["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", f"--wd={cwd or _repo()}"]

    def share(self, name: str, opts: str | None = None) -> Share:
        """The share `name` (PROFILES' options unless `opts`), mounted on every client at first call."""
        if name in self.shares:
            return self.shares[name]
        opts = opts if opts is not None else PROFILES[name]
        path = self.root / name
        path.mkdir()
        s = self.shares[name] = Share(self, name, str(path), opts)
        for where, pid, ns in self.clients:
            if _pid_alive(pid):  # a Slurm torn down, an sshd restarted without restart_sshd: not a client now
                self._mount(where, pid, ns, s)
        return s

    def add_client(self, where: str, pid: int, netns: str | None) -> None:
        """Mount every share (and later ones) in the mount namespace of process `pid`."""
        self.clients.append((where, pid, netns))
        for s in self.shares.values():
            self._mount(where, pid, netns, s)

    def add_slurm(self, slurm) -> None:
        """Each slurmd of slurm.build_slurm(c, own_mount_ns=True): its steps see the shares."""
        for ns, node in zip(self.cluster.namespaces, slurm.nodes):
            self.add_client(f"slurmd:{node}", slurm.procs[node].pid, ns)

    def restart_sshd(self, host: str) -> None:
        """cluster.start_sshd(host) after a stop_sshd, with the shares mounted again (a new mount namespace)."""
        self.clients = [c for c in self.clients if c[0] != host]
        self.add_client(host, self.cluster.start_sshd(host), self.cluster.ns_of(host))

    def _mount(self, where: str, pid: int, netns: str | None, s: Share) -> None:
        log = open(self.root.parent / f"sshfs-{where.replace(':', '-')}-{s.name}.log", "ab")
        argv = ["nsenter", f"--mount=/proc/{pid}/ns/mnt", *([f"--net=/run/netns/{netns}"] if netns else []),
                "sshfs", "-f", "-o", f"directport={self.port},allow_other,{s.opts}",
                f"{self.cluster.bridge_addr}:{s.path}", s.path]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.mounts.append(Mount(where, s.path, proc))
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not _mounted(proc.pid, s.path):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshfs of {s.path} on {where}: rc {proc.poll()}: {Path(log.name).read_text()}")
            time.sleep(0.02)

    def close(self) -> None:
        for m in self.mounts:
            if m.proc.poll() is None:
                subprocess.run(["nsenter", f"--mount=/proc/{m.proc.pid}/ns/mnt", "fusermount", "-u", "-z", m.path],
                               capture_output=True, timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(m.proc.poll() is None for m in self.mounts):
            time.sleep(0.05)
        _kill_pids([m.proc.pid for m in self.mounts if m.proc.poll() is None])
        _kill_pids([self.holder.pid])
        # socat forks a child per connection, which runs sftp-server: those first, by PID, then the listener.
        _kill_pids(_descendants(self.server.pid))
        _kill_pids([self.server.pid])
        for p in (*(m.proc for m in self.mounts), self.holder, self.server):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)


def _repo() -> str:
    return str(Path(__file__).resolve().parents[2])


def _mounted(pid: int, path: str) -> bool:
    """The FUSE mount at `path` is up in the mount namespace of `pid`."""
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == path and " - fuse.sshfs " in line for line in lines)


def _free_port(addr: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _stamp(stream, log: Path) -> threading.Thread:
    """Copy the server's stderr to `log`, each line after the wall-clock time it arrived."""

    def copy() -> None:
        with open(log, "a") as f:
            for line in stream:
                f.write(f"{time.time():.3f} {line.decode(errors='replace')}")
                f.flush()

    t = threading.Thread(target=copy, name="sftp-log", daemon=True)
    t.start()
    return t


@contextlib.contextmanager
def shared_fs(cluster: Cluster, log_level: str = "ERROR") -> Iterator[SharedFS]:
    """An SFTP server on the cluster's bridge, the head's namespace and every host a client; all ended on exit.

    log_level: sftp-server's -l (DEBUG3 logs a line per request; the suite keeps ERROR, the benchmark counts).
    """
    missing = [t for t in ("sshfs", "socat", "fusermount", "nsenter") if not shutil.which(t)]
    if missing or not os.path.exists(SFTP_SERVER):
        raise RuntimeError(f"missing {missing or SFTP_SERVER} (scripts/install-system.sh installs sshfs socat)")
    base = Path(tempfile.mkdtemp(prefix=f"vbt{os.getpid()}shared-"))
    base.chmod(0o755)
    root = base / "root"
    root.mkdir()
    port = _free_port(cluster.bridge_addr)
    log = base / "sftp.log"
    server = subprocess.Popen(
        ["socat", f"TCP-LISTEN:{port},bind={cluster.bridge_addr},reuseaddr,fork",
         f"EXEC:{SFTP_SERVER} -e -l {log_level} -d {root}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    _stamp(server.stderr, log)
    # GNU tail ends when pytest does: a crashed run leaves no holder (its sshfs is clean_stale's).
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "tail", "-f", f"--pid={os.getpid()}",
                               "/dev/null"], stdin=subprocess.DEVNULL, start_new_session=True)
    fs = SharedFS(cluster, root, port, server, holder, log)
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not (Path(f"/proc/{holder.pid}/comm").read_text().strip() == "tail" and _listening(cluster, port)):
            if server.poll() is not None or holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sftp server rc {server.poll()}, head namespace rc {holder.poll()}")
            time.sleep(0.02)
        fs.add_client("head", holder.pid, None)
        for host in cluster.hosts:
            fs.add_client(host, cluster.sshd_pids[host], cluster.ns_of(host))
        yield fs
    finally:
        fs.close()
        shutil.rmtree(base, ignore_errors=True)


def _listening(cluster: Cluster, port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection((cluster.bridge_addr, port), 0.5) as s:
        s.shutdown(socket.SHUT_RDWR)
        return True
    return False
