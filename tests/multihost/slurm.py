"""A real Slurm 22.05 over the namespace hosts of netns.py.

    with netns.build_cluster(3) as c, build_slurm(c) as s:
        s.run_in_allocation(["srun", "-N", "3", "hostname"])   # node1..node3

Layout: munged (own key and socket) and slurmctld run in the root namespace,
slurmctld on the cluster's bridge address under ``unshare --uts`` with the
hostname that SlurmctldHost names; one ``slurmd -D -N nodeN`` per host,
started with ``nsenter --net=/run/netns/NS unshare --uts`` (not ``ip netns
exec``: that remounts /sys, hides /sys/fs/cgroup, and slurmd 22.05 will not
start). Slurm node names are the hosts' hostnames (node1..), with NodeAddr
their addresses. Nothing resolves those names here, so ``s.env`` carries an
ssh config that maps nodeN to its address (as DNS would on a real cluster);
torch's rendezvous needs an address (``--master-addr``).

Settings that mattered (ENVIRONMENT.md): auth/munge with AuthInfo=socket=,
select/cons_tres, proctrack/linuxproc, task/none, ReturnToService=2, a TmpFS
per node (PMIx steps on a shared /tmp collide), MailProg=/bin/true.

Everything lives under one temp dir named ``vbt<pytest pid>slurm-*`` (so
netns.clean_stale removes a crashed run's dir); teardown cancels the jobs,
then stops by PID only what this fixture started: the slurmstepd processes
inside our namespaces (children of our slurmd), the slurmd, slurmctld and
munged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .netns import Cluster, _kill_pids, _netns_pids, _pid_alive

CTL_HOSTNAME = "vbtctl"
NVIDIA_MAJOR = 195  # the character-device major of /dev/nvidia0..N
READY_TIMEOUT_S = 40.0
NEEDED = ("slurmctld", "slurmd", "srun", "salloc", "sinfo", "scontrol", "scancel", "munged", "nsenter", "unshare")


def slurm_possible() -> str | None:
    """Why Slurm cannot run here, or None."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    missing = [t for t in NEEDED if not shutil.which(t, path=path)]
    return f"missing: {' '.join(missing)} (scripts/install-system.sh installs slurm-wlm and munge)" if missing else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@dataclass
class Slurm:
    """A running Slurm; ``env`` has SLURM_CONF and the name-mapping ssh first on PATH."""

    tmp: Path
    conf: Path
    nodes: list[str]
    addrs: list[str]
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def run(self, argv: list[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(argv, env=kwargs.pop("env", self.env), timeout=timeout, **kwargs)

    def run_in_allocation(self, argv: list[str], nodes: int | None = None, timeout: float = 300,
                          **kwargs) -> subprocess.CompletedProcess:
        """``salloc -N n ARGV``: ARGV runs here, inside a fresh allocation of n nodes."""
        return self.run(["salloc", "-N", str(nodes or len(self.nodes)), *argv], timeout=timeout, **kwargs)

    def states(self) -> dict[str, str]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15).stdout
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def log(self, name: str) -> str:
        try:
            return (self.tmp / name).read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def topology_conf(leaves: list[list[str]]) -> str:
    """A topology.conf of one leaf switch per list of nodes (leaf1, leaf2, ...) under one spine."""
    lines = [f"SwitchName=leaf{i} Nodes={','.join(nodes)}\n" for i, nodes in enumerate(leaves, 1)]
    return "".join(lines) + f"SwitchName=spine Switches=leaf[1-{len(leaves)}]\n"


def _conf(s: Slurm, ctl_addr: str, ctl_port: int, socket_path: Path, gpus: int = 0, tree: bool = False) -> str:
    d = s.tmp
    # Two tasks per node (one per GPU, or two CPU ranks: salloc --ntasks-per-node=2) need two CPUs to be placed.
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    cpus = 2
    nodes = "".join(f"NodeName={n} NodeAddr={a} CPUs={cpus}{gres} State=UNKNOWN\n" for n, a in zip(s.nodes, s.addrs))
    return f"""\
{"GresTypes=gpu" if gpus else ""}
{"TopologyPlugin=topology/tree" if tree else ""}
ClusterName=vbt
SlurmctldHost={CTL_HOSTNAME}({ctl_addr})
SlurmctldPort={ctl_port}
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d}/%n/spool
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d}/%n/slurmd.pid
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d}/%n/slurmd.log
TmpFS={d}/%n/tmp
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
{nodes}PartitionName=test Nodes={','.join(s.nodes)} Default=YES MaxTime=INFINITE State=UP
"""


def _ssh_env(c: Cluster, tmp: Path) -> dict[str, str]:
    """c.env, with an ssh that also knows the Slurm node names (DNS's job on a real cluster)."""
    base = (c.tmp / "ssh_config").read_text()
    aliases = "".join(f"Host {n}\n    HostName {a}\n" for n, a in zip(c.hostnames, c.hosts))
    # Host patterns match the name as typed: the base block must list the names
    # too; ssh keeps the first value of each option, so the aliases come first.
    first, rest = base.split("\n", 1)
    (tmp / "ssh_config").write_text(aliases + f"{first} {' '.join(c.hostnames)}\n{rest}")
    wrapper = tmp / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {tmp / "ssh_config"} "$@"\n')
    wrapper.chmod(0o755)
    env = dict(c.env)
    env["PATH"] = f"{wrapper.parent}{os.pathsep}{env['PATH']}"
    return env


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f, start_new_session=True)


def _wait(what: str, ok, procs: list[subprocess.Popen], s: Slurm, logs: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ok():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"{dead[0].args[-1]!r} exited rc {dead[0].returncode}" if dead else f"not after {READY_TIMEOUT_S}s"
            raise RuntimeError(f"slurm fixture: {what}: {why}\n" + "\n".join(f"--- {n}\n{s.log(n)}" for n in logs))
        time.sleep(0.2)


@contextlib.contextmanager
def build_slurm(c: Cluster, gpus: int = 0, own_mount_ns: bool = False,
                leaves: list[list[str]] | None = None) -> Iterator[Slurm]:
    """munged + slurmctld + one slurmd per host of ``c``; all stopped (by PID) on exit.

    own_mount_ns: each slurmd in a mount namespace of its own (``unshare --mount --propagation private``), for
    mounts that only its steps see: sharedfs.SharedFS.add_slurm mounts the shared directory there.

    gpus: GRES gpu:N per node, each GPU a plain file (gres.conf File=): nothing here is a GPU, but Slurm
    allocates them and binds them to tasks (CUDA_VISIBLE_DEVICES, SLURM_*) exactly as it would real ones.

    leaves: the nodes of each leaf switch (topology_conf): TopologyPlugin=topology/tree and a topology.conf
    beside slurm.conf, so `scontrol show topology` answers, inside an allocation too.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f"vbt{os.getpid()}slurm-"))
    tmp.chmod(0o755)
    s = Slurm(tmp=tmp, conf=tmp / "slurm.conf", nodes=list(c.hostnames), addrs=list(c.hosts), env={})
    try:
        _up(c, s, gpus, own_mount_ns, leaves)
        yield s
    finally:
        _down(c, s)
        shutil.rmtree(tmp, ignore_errors=True)


def _up(c: Cluster, s: Slurm, gpus: int = 0, own_mount_ns: bool = False,
        leaves: list[list[str]] | None = None) -> None:
    d = s.tmp
    munge_dir = d / "munge"
    munge_dir.mkdir(mode=0o755)
    munge_dir.chmod(0o755)  # munged refuses a socket dir others may write, and umask may differ
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = munge_dir / "munge.socket"
    (d / "state").mkdir()
    for n in s.nodes:
        for sub in ("spool", "tmp"):
            (d / n / sub).mkdir(parents=True)
    s.conf.write_text(_conf(s, c.bridge_addr, _free_port(), sock, gpus, tree=leaves is not None))
    if leaves is not None:
        (d / "topology.conf").write_text(topology_conf(leaves))
    if gpus:
        lines = []
        for n in s.nodes:
            for i in range(gpus):
                # slurmd drops a GRES File= that is not a character or block device ("fix your gres.conf"),
                # and then binds nothing: nodes of NVIDIA's major (195), which no driver here answers.
                os.mknod(d / n / f"nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, i))
            lines.append(f"NodeName={n} Name=gpu File={d / n}/nvidia[0-{gpus - 1}]\n")
        (d / "gres.conf").write_text("".join(lines))
    s.env = _ssh_env(c, d)
    s.env["SLURM_CONF"] = str(s.conf)

    s.procs["munged"] = _start(["munged", "-F", "-f", f"--socket={sock}", f"--key-file={key}",
                                f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
                                f"--seed-file={munge_dir / 'munged.seed'}"], d / "munged.out")
    _wait("munged", sock.exists, [s.procs["munged"]], s, ["munged.out", "munged.log"])
    # unshare and sh exec: each Popen PID ends up as the daemon's own.
    s.procs["slurmctld"] = _start(
        ["unshare", "--uts", "sh", "-c", f"hostname {CTL_HOSTNAME} && exec slurmctld -D -f {s.conf}"],
        d / "slurmctld.out")
    mount_ns = ["--mount", "--propagation", "private"] if own_mount_ns else []
    for ns, n in zip(c.namespaces, s.nodes):
        s.procs[n] = _start(["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", *mount_ns, "sh", "-c",
                             f"hostname {n} && exec slurmd -D -N {n} -f {s.conf}"], d / f"{n}.out")
    logs = ["slurmctld.out", "slurmctld.log", *(f"{n}/slurmd.log" for n in s.nodes), *(f"{n}.out" for n in s.nodes)]

    def all_idle() -> bool:
        try:
            states = s.states()
        except subprocess.TimeoutExpired:
            return False
        return len(states) == len(s.nodes) and all(v == "idle" for v in states.values())

    _wait("nodes idle", all_idle, list(s.procs.values()), s, logs)


def _down(c: Cluster, s: Slurm) -> None:
    if "slurmctld" in s.procs and s.procs["slurmctld"].poll() is None:
        with contextlib.suppress(Exception):
            s.run(["scancel", "--full", "--partition", "test"], timeout=10)
    # slurmstepd detaches from slurmd, but stays in the host's namespace: the
    # steps in our namespaces were started by our slurmd, and no sshd session
    # of another test runs while this fixture tears down.
    ours = set()
    for ns in c.namespaces:
        for pid in _netns_pids(ns):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmstepd":
                    ours.add(pid)
    _kill_pids(sorted(ours))
    order = [n for n in s.nodes if n in s.procs] + [k for k in ("slurmctld", "munged") if k in s.procs]
    for name in order:
        proc = s.procs[name]
        if proc.poll() is None:
            _kill_pids([proc.pid], grace_s=5.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    assert not any(_pid_alive(p.pid) for p in s.procs.values())
