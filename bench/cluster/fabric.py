"""A topology this machine can find by itself: Slurm's (`scontrol show topology`) or the InfiniBand fabric's
(`ibnetdiscover`). Each returns (Tree or None, what it said): a source that is not there is not an error.

    tree, said = from_slurm()          # inside an allocation with TopologyPlugin=topology/tree
    tree, said = from_ibnetdiscover()  # where infiniband-diags is installed and an HCA sees the fabric
"""

from __future__ import annotations

import os
import shutil
import subprocess

from bench.cluster import topology
from bench.cluster.topology import Tree
from bench.core.errors import BadInput

SCONTROL_TIMEOUT_S = 30.0
# A full sweep of a fabric of thousands of ports takes tens of seconds; past this bench goes on without it.
IBNETDISCOVER_TIMEOUT_S = 120.0
MAX_OUTPUT = 64 << 20  # ibnetdiscover of ~10,000 HCAs is a few MB; refuse to hold more


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(stdout, "") or (None, why it gave nothing)."""
    env = dict(os.environ if env is None else env)
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        return None, f"{argv[0]} is not on PATH"
    env.pop("SLURM_TOPO_LEN", None)  # it would cut scontrol's lines short
    try:
        out = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)}: no answer in {timeout:g} s"
    except OSError as e:
        return None, f"{' '.join(argv)}: {e.strerror}"
    err = out.stderr.decode(errors="replace").strip().splitlines()
    if out.returncode != 0:
        return None, f"{' '.join(argv)}: exit {out.returncode}" + (f": {err[-1][:200]}" if err else "")
    if len(out.stdout) > MAX_OUTPUT:
        return None, f"{' '.join(argv)}: more than {MAX_OUTPUT >> 20} MB of output"
    return out.stdout.decode(errors="replace"), err[-1][:200] if err else ""


def from_slurm(environ: dict[str, str] | None = None) -> tuple[Tree | None, str]:
    """`scontrol show topology`: a Tree where Slurm's tree plugin answers with switches."""
    out, why = _run(["scontrol", "show", "topology"], SCONTROL_TIMEOUT_S, environ)
    if out is None:
        return None, why
    try:
        tree = topology.from_scontrol(out)
    except ValueError as e:
        return None, f"scontrol show topology: cannot read its answer ({e})"
    return tree, "" if tree else f"scontrol show topology: no switch ({why or 'no topology/tree plugin'})"


def from_ibnetdiscover(environ: dict[str, str] | None = None) -> tuple[Tree | None, str]:
    """`ibnetdiscover` run here: a Tree where its HCAs' node descriptions name their hosts."""
    out, why = _run(["ibnetdiscover"], IBNETDISCOVER_TIMEOUT_S, environ)
    if out is None:
        return None, why
    try:
        return topology.from_ibnetdiscover(out, "ibnetdiscover (run on this node)", "ibnetdiscover's output"), ""
    except BadInput as e:
        return None, str(e).removeprefix("--topology: ")
