"""Real hosts on one machine: network namespaces on a bridge, one sshd each.

    with build_cluster(3) as c:        # as root
        run_on_hosts(c.hosts, ["hostname"], env=c.env)   # node1, node2, node3

Layout (slot 0; a concurrent run takes the next free /28 of 10.77.0.0/24):

    root namespace: bridge <prefix>br  10.77.0.1/28
      veth <prefix>h1 <-> vb0 in netns <prefix>-n1  10.77.0.2  hostname node1
      veth <prefix>h2 <-> vb0 in netns <prefix>-n2  10.77.0.3  hostname node2 ...

<prefix> is ``vbt<pid of pytest>``, so a crashed run's leftovers are known by
a dead PID and removed by the next run. The namespace side of every veth is
named ``vb0``, so ``GLOO_SOCKET_IFNAME=vb0`` holds for every rank. No default
route: the hosts reach 10.77.0.0/24 and nothing else. Everything else
(keys, configs, PID files, logs) lives under one temp dir; ~/.ssh is never
touched: ``c.env`` puts a ``ssh`` wrapper (``exec /usr/bin/ssh -F
<tmp>/ssh_config "$@"``) first on PATH, which pdsh, mpirun and DeepSpeed's
launcher all find. The launcher runs in the root namespace and reaches the
hosts through the bridge address; the hosts share this filesystem (like NFS).

OpenMPI 4.1.4 across the namespaces. This ran ``hostname`` and a C
MPI_Allreduce on 3 and 4 hosts (tests/multihost/test_remote.py: test_mpirun_*;
``c.mpirun_args()`` returns the options):

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH=<tmp>/bin:$PATH \\
    mpirun -np 3 --hostfile <tmp>/hostfile \\
        --bind-to none \\
        --mca plm_rsh_agent <tmp>/bin/ssh \\
        --mca plm_rsh_no_tree_spawn 1 \\
        --mca oob_tcp_if_include 10.77.0.0/28 \\
        --mca btl_tcp_if_include 10.77.0.0/28 \\
        --mca btl self,tcp \\
        PROGRAM

What each one does, found by dropping them one at a time (2026-11-30):
- needed: the two OMPI_ALLOW_* (we are root) and an ssh that carries the
  config: the wrapper first on PATH, or ``plm_rsh_agent`` naming it by
  absolute path (which also holds if PATH gets rewritten).
- needed for MPI traffic: ``btl_tcp_if_include`` must not name eth0, which
  does not exist in the namespaces. DeepSpeed's openmpi runner (and bench's
  mpirun command, which writes the same) adds ``--mca btl_tcp_if_include
  eth0`` unless the options carry their own: with it the allreduce died of
  SIGSEGV ("invalid if_inexclude"); ``--mca btl_tcp_if_include
  10.77.0.0/28`` (or ``vb0``) fixes it. DeepSpeed also adds ``--mca btl ^openib``, which is harmless.
- for speed: ``--bind-to none`` (the default binding puts ranks on core 0).
- not needed here, kept as belt and braces: ``oob_tcp_if_include`` (orted
  finds the bridge address after eth0's fails at once: no route),
  ``plm_rsh_no_tree_spawn`` (tree spawn would have orted ssh onwards with
  plain /usr/bin/ssh and no key; at 4 hosts mpirun launched all directly),
  ``btl self,tcp``.
Use the cluster's own subnet (``c.subnet``), not the whole /24: a second
run on the machine has the next /28 on its own bridge.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SUBNET_BASE = "10.77.0."  # every address used lies in 10.77.0.0/24
SLOT_SIZE = 16  # a /28 per cluster: bridge .1, up to 13 hosts
MAX_HOSTS = SLOT_SIZE - 3
NS_IFNAME = "vb0"
PREFIX_RE = re.compile(r"^vbt(\d+)")
LOCK_DIR = Path("/run/vitbench-netns")
SSHD = "/usr/sbin/sshd"
READY_TIMEOUT_S = 10.0


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _pid_alive(pid: int) -> bool:
    """True while the process runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill_pids(pids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL what is left after ``grace_s``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _netns_pids(ns: str) -> list[int]:
    proc = _run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def _netns_names() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_names() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    # "7: vbt123h1@if2: <...>" -> vbt123h1
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def _remove(namespaces: list[str], links: list[str]) -> None:
    """Kill what runs inside our namespaces, then delete them and our links."""
    for ns in namespaces:
        _kill_pids(_netns_pids(ns))
    for ns in namespaces:
        _run(["ip", "netns", "del", ns], check=False)
    for link in links:
        _run(["ip", "link", "del", link], check=False)


def clean_stale() -> list[str]:
    """Remove namespaces and links of runs whose pytest PID is gone; return their names."""
    stale_ns = [n for n in _netns_names() if (m := PREFIX_RE.match(n)) and not _pid_alive(int(m[1]))]
    stale_links = [
        n for n in _link_names() if (m := PREFIX_RE.match(n)) and not _pid_alive(int(m[1]))
    ]
    if stale_ns or stale_links:
        _remove(stale_ns, stale_links)
    stale_dirs = [
        d for d in Path(tempfile.gettempdir()).glob("vbt*-*")
        if (m := PREFIX_RE.match(d.name)) and not _pid_alive(int(m[1])) and d.is_dir()
    ]
    for d in stale_dirs:
        shutil.rmtree(d, ignore_errors=True)
    return stale_ns + stale_links + [str(d) for d in stale_dirs]


def _clean_slot(slot: int) -> None:
    """Remove what a dead holder of this slot left (its lock died with it, even if its PID is reused)."""
    pattern = re.compile(rf"^vbt\d+s{slot}(br|h\d+|-n\d+)$")
    _remove([n for n in _netns_names() if pattern.match(n)], [n for n in _link_names() if pattern.match(n)])


def netns_possible() -> str | None:
    """Why namespace hosts cannot be built here, or None."""
    if os.geteuid() != 0:
        return "multi-host tests need root (ip netns, veth, bridge)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is missing"
    probe = f"vbt{os.getpid()}-probe"
    proc = _run(["ip", "netns", "add", probe], check=False)
    _run(["ip", "netns", "del", probe], check=False)
    if proc.returncode != 0:
        return f"`ip netns add` is impossible here: {proc.stderr.strip()}"
    return None


def _take_slots(count: int = 1) -> tuple[int, list[int]]:
    """Lock the first `count` adjacent free /28s of 10.77.0.0/24 (one /27 for 2, a /26 for 4); (first slot,
    fds). The locks die with us."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for first in range(0, 256 // SLOT_SIZE, count):
        fds = []
        for slot in range(first, first + count):
            fd = os.open(LOCK_DIR / f"slot{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                break
            fds.append(fd)
        if len(fds) == count:
            return first, fds
        for fd in fds:
            os.close(fd)
    raise RuntimeError(f"no {count} adjacent free subnets of 10.77.0.0/24 ({LOCK_DIR})")


@dataclass
class Cluster:
    """Hosts built by build_cluster(); addresses in ``hosts``, names in ``hostnames``."""

    tmp: Path
    prefix: str
    bridge: str
    subnet: str  # e.g. 10.77.0.0/28
    bridge_addr: str
    hosts: list[str]
    hostnames: list[str]
    namespaces: list[str]
    veths: list[str]  # root-namespace side, one per host
    hostfile: Path
    ssh_wrapper: Path
    env: dict[str, str]
    sshd_pids: dict[str, int] = field(default_factory=dict)
    _sshd_procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def _index(self, host: str) -> int:
        for names in (self.hosts, self.hostnames, self.namespaces):
            if host in names:
                return names.index(host)
        raise KeyError(f"unknown host {host!r}; have {self.hosts}")

    def ns_of(self, host: str) -> str:
        return self.namespaces[self._index(host)]

    def veth_of(self, host: str) -> str:
        return self.veths[self._index(host)]

    def node_dir(self, host: str) -> Path:
        return self.tmp / self.hostnames[self._index(host)]

    def exec_in(self, host: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run argv inside the host's network namespace (not its UTS one: hostname is ours)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(["ip", "netns", "exec", self.ns_of(host), *argv], **kwargs)

    def write_hostfile(self, slots: int | list[int] = 1, name: str | None = None) -> Path:
        """A DeepSpeed/OpenMPI hostfile: one ``ADDR slots=N`` line per host."""
        counts = [slots] * len(self.hosts) if isinstance(slots, int) else list(slots)
        if len(counts) != len(self.hosts):
            raise ValueError(f"{len(counts)} slot counts for {len(self.hosts)} hosts")
        path = self.tmp / (name or f"hostfile-{'-'.join(map(str, counts))}")
        path.write_text("".join(f"{h} slots={n}\n" for h, n in zip(self.hosts, counts)))
        return path

    def mpirun_args(self) -> list[str]:
        """OpenMPI options that work across the namespaces (see the module docstring)."""
        return [
            "--bind-to", "none",
            "--mca", "plm_rsh_agent", str(self.ssh_wrapper),
            "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "oob_tcp_if_include", self.subnet,
            "--mca", "btl_tcp_if_include", self.subnet,
            "--mca", "btl", "self,tcp",
        ]  # fmt: skip

    def start_sshd(self, host: str, wait: bool = True, mount_over: str | None = None,
                   bind_over: tuple[str, str] | None = None) -> int:
        """Start (or restart) the host's sshd; its PID, once it accepts connections.

        mount_over: a directory that this host, and only it, sees with an empty
        tmpfs mounted over it (its sshd in its own mount namespace): a node
        whose "shared" directory is a local one. bind_over (src, dst): this
        host, and only it, sees directory src at dst (a file on one host's
        path, e.g. a sitecustomize). Either is gone when its sshd stops.
        """
        i = self._index(host)
        node = self.tmp / self.hostnames[i]
        old = self._sshd_procs.get(self.hosts[i])
        if old is not None and old.poll() is None:
            return old.pid
        log = open(node / "sshd.log", "ab")
        inner = f"hostname {self.hostnames[i]} && exec {SSHD} -D -e -f {node / 'sshd_config'}"
        unshare = ["unshare", "--uts"]
        if mount_over is not None:
            unshare += ["--mount", "--propagation", "private"]
            inner = f"mount -t tmpfs -o size=1m vitbench-local {shlex.quote(mount_over)} && {inner}"
        elif bind_over is not None:
            unshare += ["--mount", "--propagation", "private"]
            inner = f"mount --bind {shlex.quote(bind_over[0])} {shlex.quote(bind_over[1])} && {inner}"
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[i], *unshare, "sh", "-c", inner],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        # ip netns exec, unshare and sh all exec: the Popen PID ends up as sshd's.
        self._sshd_procs[self.hosts[i]] = proc
        self.sshd_pids[self.hosts[i]] = proc.pid
        if wait:
            self.wait_ready([self.hosts[i]])
        return proc.pid

    def wait_ready(self, hosts: list[str] | None = None) -> None:
        """Block until each host's sshd accepts TCP on port 22 through the bridge."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        for host in hosts or self.hosts:
            proc = self._sshd_procs[host]
            addr = self.hosts[self._index(host)]
            while True:
                if proc.poll() is not None:
                    log = (self.node_dir(host) / "sshd.log").read_text(errors="replace")
                    raise RuntimeError(f"sshd on {host} exited rc {proc.returncode}: {log.strip()}")
                with contextlib.suppress(OSError), socket.create_connection((addr, 22), 0.5):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {host} not accepting after {READY_TIMEOUT_S}s")
                time.sleep(0.02)

    def stop_sshd(self, host: str) -> None:
        """Kill the host's sshd by its PID; established sessions stay (as on a real host)."""
        proc = self._sshd_procs.pop(self.hosts[self._index(host)], None)
        pid = self.sshd_pids.pop(self.hosts[self._index(host)], None)
        pidfile = self.node_dir(host) / "sshd.pid"
        pids = {p for p in (pid, _read_pid(pidfile)) if p}
        _kill_pids(sorted(pids))
        if proc is not None:
            proc.wait()
        pidfile.unlink(missing_ok=True)

    def link_down(self, host: str) -> None:
        """Cut the host's cable (the bridge side of its veth)."""
        _run(["ip", "link", "set", self.veth_of(host), "down"])

    def link_up(self, host: str) -> None:
        _run(["ip", "link", "set", self.veth_of(host), "up"])

    def teardown(self) -> None:
        for host in list(self._sshd_procs):
            with contextlib.suppress(Exception):
                self.stop_sshd(host)
        # Session children of sshd (a remote command still running) outlive
        # the listener; they live in our namespaces, so they are ours.
        _remove(self.namespaces, [*self.veths, self.bridge])


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keygen(path: Path, comment: str) -> None:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def _sshd_config(node: Path, addr: str, authorized: Path) -> str:
    return f"""\
ListenAddress {addr}
Port 22
HostKey {node / 'ssh_host_ed25519_key'}
PidFile {node / 'sshd.pid'}
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
LogLevel ERROR
Subsystem sftp internal-sftp
"""


def _ssh_config(tmp: Path, hosts: list[str]) -> str:
    return f"""\
Host {' '.join(hosts)}
    User root
    IdentityFile {tmp / 'id_ed25519'}
    IdentitiesOnly yes
    UserKnownHostsFile {tmp / 'known_hosts'}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 5
    LogLevel ERROR
"""


@contextlib.contextmanager
def build_cluster(n: int = 3, tmp_root: str | None = None) -> Iterator[Cluster]:
    """Build ``n`` hosts with sshd, yield them, tear everything down (also on failure).

    Up to 13 hosts take a /28; more take adjacent /28s as one subnet (29 in a /27, 61 in a /26), e.g. for
    benchmarks/validate_orchestration.py's 16 hosts.
    """
    width = next((k for k in (1, 2, 4) if n <= SLOT_SIZE * k - 3), None)
    if n < 1 or width is None:
        raise ValueError(f"1..{SLOT_SIZE * 4 - 3} hosts per cluster, not {n}")
    slot, lock_fds = _take_slots(width)
    for k in range(slot, slot + width):
        _clean_slot(k)
    base = slot * SLOT_SIZE
    bits = 32 - (SLOT_SIZE * width).bit_length() + 1
    prefix = f"vbt{os.getpid()}s{slot}"
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=tmp_root))
    hosts = [f"{SUBNET_BASE}{base + 2 + i}" for i in range(n)]
    cluster = Cluster(
        tmp=tmp,
        prefix=prefix,
        bridge=f"{prefix}br",
        subnet=f"{SUBNET_BASE}{base}/{bits}",
        bridge_addr=f"{SUBNET_BASE}{base + 1}",
        hosts=hosts,
        hostnames=[f"node{i + 1}" for i in range(n)],
        namespaces=[f"{prefix}-n{i + 1}" for i in range(n)],
        veths=[f"{prefix}h{i + 1}" for i in range(n)],
        hostfile=tmp / "hostfile",
        ssh_wrapper=tmp / "bin" / "ssh",
        env={},
    )
    try:
        _build(cluster)
        yield cluster
    finally:
        try:
            cluster.teardown()
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            for fd in lock_fds:
                os.close(fd)


def _no_ipv6(link: str, ns: str | None = None) -> None:
    """No IPv6 link-local address, so no router solicitation or DAD: our only traffic
    stays inside 10.77.0.0/24. Best effort: a kernel without IPv6 sends none anyway."""
    _run(["ip", *(["-n", ns] if ns else []), "link", "set", link, "addrgenmode", "none"], check=False)


def _build(c: Cluster) -> None:
    tmp = c.tmp
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privsep dir
    _keygen(tmp / "id_ed25519", "vitbench-test-client")
    authorized = tmp / "authorized_keys"
    authorized.write_text((tmp / "id_ed25519.pub").read_text())

    _run(["ip", "link", "add", c.bridge, "type", "bridge"])
    _no_ipv6(c.bridge)
    _run(["ip", "addr", "add", f"{c.bridge_addr}/{c.subnet.split('/')[1]}", "dev", c.bridge])
    _run(["ip", "link", "set", c.bridge, "up"])
    known = []
    for host, name, ns, veth in zip(c.hosts, c.hostnames, c.namespaces, c.veths):
        node = tmp / name
        node.mkdir()
        _keygen(node / "ssh_host_ed25519_key", f"{name}-host")
        keytype, key = (node / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        known.append(f"{host} {keytype} {key}\n")
        (node / "sshd_config").write_text(_sshd_config(node, host, authorized))
        _run(["ip", "netns", "add", ns])
        # Create the peer straight inside the namespace: every host's is vb0.
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", NS_IFNAME, "netns", ns])
        _no_ipv6(veth)
        _no_ipv6(NS_IFNAME, ns)
        _run(["ip", "link", "set", veth, "master", c.bridge, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{host}/{c.subnet.split('/')[1]}", "dev", NS_IFNAME])
        _run(["ip", "-n", ns, "link", "set", NS_IFNAME, "up"])
    (tmp / "known_hosts").write_text("".join(known))
    (tmp / "ssh_config").write_text(_ssh_config(tmp, c.hosts))
    c.ssh_wrapper.parent.mkdir()
    c.ssh_wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {tmp / "ssh_config"} "$@"\n')
    c.ssh_wrapper.chmod(0o755)
    c.write_hostfile(1, name="hostfile")
    env = dict(os.environ)
    env["PATH"] = f"{c.ssh_wrapper.parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["GLOO_SOCKET_IFNAME"] = NS_IFNAME
    c.env = env
    for host in c.hosts:
        c.start_sshd(host, wait=False)
    c.wait_ready()
