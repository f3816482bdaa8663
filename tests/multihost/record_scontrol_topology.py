"""Records `scontrol show topology` from the suite's real Slurm (slurm.py) into tests/fixtures/topology/.

    /work/tools/heavy .venv/bin/python -m tests.multihost.record_scontrol_topology

Not a test: run once, the files kept as fixtures (their SOURCES.md says how). Three namespace hosts; Slurm
with TopologyPlugin=topology/tree, node1 and node2 on leaf1, node3 on leaf2, both under spine (the suite's
`slurm` fixture): the command's whole stdout inside `salloc -N 3`. Then the same Slurm without the tree
plugin: what scontrol answers there (stdout, stderr, exit status).
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import netns
from .slurm import build_slurm

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "topology"


def main() -> int:
    netns.clean_stale()
    with netns.build_cluster(3) as c:
        names = c.hostnames
        with build_slurm(c, leaves=[names[:2], names[2:]]) as s:
            got = s.run_in_allocation(["scontrol", "show", "topology"], nodes=3, timeout=60)
            assert got.returncode == 0, got.stderr
            (OUT / "scontrol-show-topology_tree_2-leaves-1-spine.txt").write_text(got.stdout)
            print(got.stdout, got.stderr, file=sys.stderr)
        with build_slurm(c) as s:
            got = s.run_in_allocation(["scontrol", "show", "topology"], nodes=3, timeout=60)
            (OUT / "scontrol-show-topology_no-tree-plugin.stdout.txt").write_text(got.stdout)
            (OUT / "scontrol-show-topology_no-tree-plugin.stderr.txt").write_text(got.stderr)
            print(got.returncode, got.stdout, got.stderr, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
