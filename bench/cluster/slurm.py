"""A Slurm allocation read as a hostfile: its nodes, and one slot per task Slurm planned on each.

    slurm_hosts()          # {"node1": 4, "node2": 4} inside `salloc -N 2 --ntasks-per-node=4`
    tasks_per_node("2(x3),1")   # [2, 2, 2, 1]
"""

from __future__ import annotations

import os
import re

from bench.core.errors import BadInput


def tasks_per_node(spec: str) -> list[int]:
    """Slurm's SLURM_TASKS_PER_NODE ("2(x3),1") as one count per node ([2, 2, 2, 1])."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise BadInput(f"SLURM_TASKS_PER_NODE: cannot read {spec!r}")
        counts += [int(m[1])] * int(m[2] or 1)
    return counts


def slurm_hosts(environ: dict[str, str] | None = None) -> dict[str, int]:
    """The current allocation as a hostfile would say it: {node: slots}.

    One slot per task Slurm planned on each node (--ntasks-per-node, e.g. one
    per GPU); the node list is expanded by `scontrol show hostnames`, Slurm's
    own reader of its hostlist syntax. BadInput outside an allocation.
    """
    import subprocess

    environ = dict(os.environ if environ is None else environ)
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise BadInput("--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_NODELIST); "
                       "run bench under sbatch or salloc, or give --hostfile")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, env=environ)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"--launcher slurm: scontrol show hostnames {nodelist}: {e}") from None
    nodes = out.stdout.split()
    if out.returncode != 0 or not nodes:
        raise BadInput(f"--launcher slurm: scontrol show hostnames {nodelist}: {out.stderr.strip() or 'no hosts'}")
    if environ.get("SLURM_NTASKS_PER_NODE", "").isdigit():
        counts = [int(environ["SLURM_NTASKS_PER_NODE"])] * len(nodes)
    elif environ.get("SLURM_TASKS_PER_NODE"):
        counts = tasks_per_node(environ["SLURM_TASKS_PER_NODE"])
    else:
        counts = [1] * len(nodes)
    if len(counts) != len(nodes):
        raise BadInput(f"SLURM_TASKS_PER_NODE: {len(counts)} counts for {len(nodes)} nodes ({nodelist})")
    return dict(zip(nodes, counts))


# Slurm keeps a node's reason in a fixed-size field; a reason longer than this is cut (with "...").
REASON_MAX = 200


def drain_argv(node: str, reason: str) -> list[str]:
    """The scontrol command that drains `node` with `reason` (an argument list: no shell sees the reason)."""
    text = " ".join(reason.split())
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 3] + "..."
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"]


def drain(node: str, reason: str, environ: dict[str, str] | None = None, timeout: float = 30.0) -> tuple[bool, str]:
    """Drain one node; (done, what scontrol said or why it could not run)."""
    import subprocess

    try:
        out = subprocess.run(drain_argv(node, reason), capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ if environ is None else environ))
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"scontrol: {e}"
    said = (out.stderr or out.stdout).strip()
    return out.returncode == 0, said or ("drained" if out.returncode == 0 else f"scontrol exited {out.returncode}")
