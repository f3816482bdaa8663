"""Which topology bench validate pairs its nodes by, and what it says when there is none.

    found = find(cfg)              # Found(tree, tried): --topology FILE, else Slurm's, else ibnetdiscover's
    record(found, hosts, hostname_of, cfg.pairs_seed)   # the record's "topology"
    lines(found, hosts, hostname_of, cfg.pairs_seed)    # what the terminal says about it

In order: `--topology FILE` (Slurm's topology.conf or a saved ibnetdiscover
output; bad input refused, exit 2); inside a Slurm allocation, `scontrol
show topology` when Slurm's tree plugin answers with switches; where
`ibnetdiscover` is on PATH, its sweep of the fabric. Without any, pairs
cannot be chosen to cross leaf switches: the record and the terminal say
that the uplinks were not knowingly covered, and the ring goes in a seeded
shuffle rather than the hostfile's order (bench.validate.pairing.ring_order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.cluster import fabric, topology
from bench.cluster.slurm import in_allocation
from bench.cluster.topology import Tree
from bench.validate import pairing
from bench.validate.config import ValidateConfig


@dataclass(frozen=True)
class Found:
    tree: Tree | None
    tried: tuple[str, ...] = field(default=())   # what each source tried before said, when it gave nothing


def find(cfg: ValidateConfig, nodes: int, environ: dict[str, str] | None = None) -> Found:
    """The topology of a validate of `nodes` nodes; BadInput for a --topology file Slurm (or bench) would refuse.
    Nothing is looked for where no pair of nodes will be measured (one node, a prolog: no fabric sweep per job)."""
    if cfg.topology:
        return Found(topology.read(cfg.topology))
    if nodes < 2 or not (cfg.wanted("inter-node") or cfg.wanted("rails")):
        return Found(None, ("no pair of nodes to measure: no topology looked for",))
    tried: list[str] = []
    if in_allocation(environ):
        tree, why = fabric.from_slurm(environ)
        if tree is not None:
            return Found(tree)
        tried.append(why)
    else:
        tried.append("scontrol show topology: not inside a Slurm allocation")
    tree, why = fabric.from_ibnetdiscover(environ)
    if tree is not None:
        return Found(tree, tuple(tried))
    return Found(None, (*tried, why))


def leaves(found: Found, hosts: list[str], hostname_of: dict[str, str]) -> list[str | None] | None:
    return None if found.tree is None else found.tree.leaves(hosts, hostname_of)


def covered(found: Found, hosts: list[str], hostname_of: dict[str, str]) -> tuple[bool, str]:
    """(whether pairs were chosen to cross leaf switches, and why not)."""
    if len(hosts) < 2:
        return False, "one node: no pair between nodes"
    if found.tree is None:
        return False, ("no topology (--topology FILE, Slurm's topology/tree, ibnetdiscover): inter-node pairs do "
                       "not knowingly cross leaf switches: uplinks not covered")
    placed = {leaf for leaf in found.tree.leaves(hosts, hostname_of) if leaf is not None}
    if not placed:
        return False, f"{found.tree.source} places none of these hosts: uplinks not covered"
    if len(placed) == 1 and not found.tree.unplaced(hosts, hostname_of):
        return False, f"every host hangs off {next(iter(placed))}: no pair crosses an uplink"
    return True, ""


def record(found: Found, hosts: list[str], hostname_of: dict[str, str], seed: int, kind: str = "ring") -> dict[str, Any]:
    """The validate record's "topology": its source, the hosts' leaves and what is above them, the hosts it
    does not place, whether the uplinks were covered (and why not), and the ring's order (kind: the level's
    pairs, bench.validate.pairing)."""
    ok, why = covered(found, hosts, hostname_of)
    out: dict[str, Any] = {"source": None, "leaf_of": {}, "up": {}}
    if found.tree is not None:
        out.update(found.tree.as_record(hosts, hostname_of), unplaced=found.tree.unplaced(hosts, hostname_of))
    out.update(uplinks_covered=ok,
               ring=pairing.describe_order(kind, len(hosts), leaves(found, hosts, hostname_of), seed))
    if why:
        out["why"] = why
    if found.tried:
        out["tried"] = list(found.tried)
    return out


def lines(found: Found, hosts: list[str], hostname_of: dict[str, str], seed: int, kind: str = "ring") -> list[str]:
    """What the terminal says: where the leaves came from and what they miss, or that the uplinks go
    uncovered, and how the ring is ordered instead."""
    ok, why = covered(found, hosts, hostname_of)
    out = []
    if found.tree is not None:
        placed = found.tree.leaves(hosts, hostname_of)
        out.append(f"topology: {found.tree.source}: {sum(x is not None for x in placed)} of {len(hosts)} hosts on "
                   f"{len({x for x in placed if x is not None})} leaf switch(es)")
        if found.tree.design is not None:
            out.append(f"topology: the fabric's design {found.tree.design[0]:.2g}:1 ({found.tree.design[1]}): the "
                       "norm of the pairs across leaves where they measure slower (--oversubscription overrides)")
        missing = found.tree.unplaced(hosts, hostname_of)
        if missing:
            out.append(f"topology: {found.tree.source} does not place {_some(missing)}: their pairs are judged as "
                       "across leaf switches, and they are never drained for them (held, named unplaced)" +
                       ("" if hostname_of else " (by hostfile name: a node the topology names by its hostname is "
                        "placed once reached)"))
    placed = leaves(found, hosts, hostname_of)
    if ok and placed and len({x for x in placed if x is not None}) >= 3:
        seen, total = pairing.coverage(pairing.first_rounds(kind, len(hosts), seed, leaves=placed), placed)
        out.append(f"topology: the first pairs meet {seen} of the {total} leaf pairs (seed {seed}): a slow path "
                   "between two leaves they do not meet is not seen (another --pairs-seed meets others)")
    if not ok and len(hosts) >= 2:
        order = pairing.describe_order(kind, len(hosts), leaves(found, hosts, hostname_of), seed)
        out.append(f"topology: {why}; the ring's order: {order.split(':')[0]}")
    return out


def _some(hosts: list[str], most: int = 8) -> str:
    shown = ", ".join(hosts[:most])
    return shown + (f" and {len(hosts) - most} more" if len(hosts) > most else "")
