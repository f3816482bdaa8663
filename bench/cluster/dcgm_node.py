"""DCGM's diagnostic on every node at once, each under its own deadline: bench validate's dcgm stage.

    answers, unreached = diagnose_all("ssh", ["n1", "n2"], level=2, timeout=240.0, wait=255.0)
    answers["n1"]["timed_out"], answers["n1"]["seconds"], answers["n1"]["report"]["findings"]
    python -m bench.cluster.dcgm_node 2 240      # what each node runs: one JSON line

Each node runs `dcgmi diag -r LEVEL -j` itself, killed (with what it started)
after TIMEOUT seconds, and prints one JSON line: its hostname, the level, how
long dcgmi ran, whether it ran past its time, and a health report
(bench.cluster.health.report) of DCGM's findings. The node keeps its own
clock, so one node whose diagnostic runs long answers "did not finish" in
time and the others' answers stand, whether the nodes were reached by one
ssh each, one srun step or one mpirun. `wait` bounds the head's wait for a
node that does not answer at all (not reached, or hung before dcgmi).
"""

from __future__ import annotations

import json
import socket
import sys

from bench.cluster.accel.nvidia import dcgm
from bench.cluster.health.report import Report


def node_answer(level: int, timeout: float) -> dict:
    """This node's answer: dcgmi's run under the deadline, read as a health report."""
    d = dcgm.diag(level, timeout)
    r = Report(socket.gethostname(), None)
    dcgm.report_into(r, level, d.text, d.why, d.expected)
    return {"hostname": socket.gethostname(), "level": level, "timeout_s": timeout, "seconds": round(d.seconds, 1),
            "timed_out": d.timed_out, "installed": d.expected, "report": r.done()}


def _answer_of(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("report"), dict):
            return doc
    return None


def diagnose_all(via: str | None, hosts: list[str], level: int, timeout: float, wait: float,
                 container_exec: str | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """({host: its answer}, {host: why no answer}) of every host, reached by via: "ssh", "srun", "mpirun", or None
    (this node, in this process)."""
    if via is None:
        return {h: node_answer(level, timeout) for h in hosts}, {}
    from bench.cluster.container import remote_python

    argv = [*remote_python(container_exec), "-m", "bench.cluster.dcgm_node", str(level), repr(float(timeout))]
    if via == "srun":
        from bench.cluster.probe_launch import srun_per_node
        results = srun_per_node(hosts, argv, wait)
    elif via == "mpirun":
        from bench.cluster.probe_launch import mpirun_per_node
        results = mpirun_per_node(hosts, argv, wait)
    else:
        from bench.cluster.remote import run_on_hosts
        results = run_on_hosts(hosts, argv, timeout=wait)
    answers, unreached = {}, {}
    for host in hosts:
        r = results.get(host)
        doc = _answer_of(r.stdout) if r is not None else None
        if doc is not None:
            answers[host] = doc
        else:
            why = (r.error or f"exited {r.rc}: " + ((r.stderr or "").strip().splitlines() or ["no answer"])[-1][:200]
                   ) if r is not None else "no answer"
            unreached[host] = why
    return answers, unreached


def main(args: list[str]) -> int:
    level, timeout = int(args[0]), float(args[1])
    print(json.dumps(node_answer(level, timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
