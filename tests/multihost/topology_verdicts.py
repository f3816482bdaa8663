"""What the real slurmctld says of each topology.conf in tests/fixtures/topology/conf/: started, or refused.

    /work/tools/heavy .venv/bin/python -m tests.multihost.topology_verdicts > tests/fixtures/topology/slurmctld-verdicts.txt

Not a test: it records, once, what Debian's Slurm (22.05.8) does with each file, and
tests/unit/test_topology.py holds bench's reading of the same files against it. For each file: a
slurm.conf with TopologyPlugin=topology/tree and NodeName=node[1-3] beside a copy of it (and of
included.part), munged of its own, and `slurmctld -D` under `unshare --uts` with the hostname that
SlurmctldHost names; slurmctld either exits (its fatal line is kept) or answers `scontrol ping`, and is then
stopped by its PID. Each line of the output: `<file> started` or `<file> refused: <slurmctld's last error>`,
then the warnings it logged about the topology.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .slurm import CTL_HOSTNAME, _free_port, _start

CONF = Path(__file__).resolve().parents[1] / "fixtures" / "topology" / "conf"


def _slurm_conf(d: Path, port: int, sock: Path) -> str:
    return (f"ClusterName=vbt\nSlurmctldHost={CTL_HOSTNAME}(127.0.0.1)\nSlurmctldPort={port}\nAuthType=auth/munge\n"
            f"AuthInfo=socket={sock}\nCredType=cred/munge\nSlurmUser=root\nStateSaveLocation={d / 'state'}\n"
            f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmctldLogFile={d / 'slurmctld.log'}\n"
            "SelectType=select/cons_tres\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "TopologyPlugin=topology/tree\nMailProg=/bin/true\n"
            "NodeName=node[1-3] NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN\nPartitionName=test Nodes=ALL Default=YES\n")


def _printable(text: str, most: int = 160) -> str:
    """A log line as one printable line: the random-bytes file's lines come back quoted in slurmctld's errors."""
    text = "".join(ch if ch.isprintable() and ch != "\ufffd" else "?" for ch in text)
    return text if len(text) <= most else text[:most] + "..."


def verdict(case: Path, d: Path, sock: Path) -> str:
    shutil.rmtree(d / "state", ignore_errors=True)
    (d / "state").mkdir()
    (d / "slurmctld.log").unlink(missing_ok=True)
    shutil.copy(case, d / "topology.conf")
    shutil.copy(CONF / "included.part", d / "included.part")
    port = _free_port()
    (d / "slurm.conf").write_text(_slurm_conf(d, port, sock))
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    proc = _start(["unshare", "--uts", "sh", "-c", f"hostname {CTL_HOSTNAME} && exec slurmctld -D -f {d}/slurm.conf"],
                  d / "slurmctld.out")
    deadline, started = time.monotonic() + 30, False
    while time.monotonic() < deadline and proc.poll() is None:
        if subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=10).stdout.count("UP"):
            started = True
            break
        time.sleep(0.3)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    log = (d / "slurmctld.log").read_text(errors="replace").splitlines()
    said = [_printable(line.split("] ", 1)[-1]) for line in log
            if "error:" in line or "fatal:" in line or "warning" in line.lower()]
    topo = [s for s in said if any(w in s.lower() for w in ("switch", "topolog", "node name", "hostname", "parse",
                                                              "leaf", "key", "linkspeed", "hostlist", "range",
                                                              "include", "not a tree", "child"))]
    head = f"{case.name} started" if started else f"{case.name} refused: {(topo or said or ['?'])[-1]}"
    return head + "".join(f"\n    {s}" for s in topo if not head.endswith(s))


def main() -> int:
    d = Path(tempfile.mkdtemp(prefix=f"vbt{os.getpid()}slurm-topo-"))
    d.chmod(0o755)
    munge = d / "munge"
    munge.mkdir(mode=0o755)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = munge / "munge.socket"
    md = _start(["munged", "-F", "-f", f"--socket={sock}", f"--key-file={key}", f"--pid-file={munge}/pid",
                 f"--log-file={d}/munged.log", f"--seed-file={munge}/seed"], d / "munged.out")
    try:
        while not sock.exists():
            time.sleep(0.1)
        version = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True).stdout.strip()
        print(f"# {version}: each file of tests/fixtures/topology/conf as topology.conf (topology/tree), "
              "NodeName=node[1-3]")
        for case in sorted(CONF.glob("*.conf")):
            print(verdict(case, d, sock), flush=True)
    finally:
        os.kill(md.pid, signal.SIGTERM)
        md.wait(timeout=10)
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
