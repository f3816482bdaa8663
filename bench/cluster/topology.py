"""Which leaf switch each node hangs off, and what is above each switch: a Tree, from wherever one exists.

    tree = read("/etc/slurm/topology.conf")     # Slurm's tree plugin's file, refused where Slurm refuses it
    tree = read("fabric.ibnet")                  # a saved `ibnetdiscover` output (told apart by its lines)
    tree = from_scontrol(text)                   # `scontrol show topology`'s answer (None: no switch)
    tree.leaf_of["node01"], tree.parent("leaf1")  # "leaf1", "spine" (None: no switch above, or several)
    tree.leaves(["node01", "10.0.0.9"], {})      # ["leaf1", None]: by hostfile name, else the hostname given

    SwitchName=leaf1 Nodes=node[01-16]
    SwitchName=leaf2 Nodes=node[17-32]
    SwitchName=spine Switches=leaf[1-2]

A switch with nodes below it is a leaf; one with switches below joins them
(`up` maps each switch to those above it: one in a tree, every spine a leaf
is cabled to in a fat tree). bench validate pairs nodes across leaves and
judges a pair beside the pairs of the same leaves (bench.validate.pairing,
pairs); bench.validate.tree picks the source. Parsers: topology_conf
(topology.conf, `scontrol show topology`), ibnetdiscover.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.cluster import ib_ports, ibnetdiscover, topology_conf
from bench.core.capped import read_capped
from bench.core.errors import BadInput

# ibnetdiscover's output for 10,000 nodes is a few MB; more is a wrong path (/dev/zero).
MAX_TOPOLOGY_BYTES = 64 << 20


@dataclass(frozen=True)
class Tree:
    """Where nodes hang in the fabric. Names are the source's: Slurm's NodeName and SwitchName, or an HCA's node
    description (its host) and a switch's for ibnetdiscover."""

    leaf_of: dict[str, str]                          # node -> its leaf switch
    up: dict[str, tuple[str, ...]]                   # switch -> the switches it is cabled to above it
    source: str                                      # "topology.conf PATH", "scontrol show topology", "ibnetdiscover PATH"
    hcas: dict[str, dict[str, str]] = field(default_factory=dict)  # ibnetdiscover: node -> {HCA: its leaf}
    design: tuple[float, str] | None = None  # ibnetdiscover: its oversubscription by its ports, and how (ib_ports)
    uplinks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # ibnetdiscover: leaf -> its ports up

    def parent(self, switch: str) -> str | None:
        """The switch above `switch`, where there is exactly one (a fat tree's leaf has several: above())."""
        above = self.up.get(switch, ())
        return above[0] if len(above) == 1 else None

    def above(self, switch: str) -> tuple[str, ...]:
        return self.up.get(switch, ())

    def leaves(self, hosts: list[str], hostname_of: dict[str, str]) -> list[str | None]:
        return leaves_of(hosts, self.leaf_of, hostname_of)

    def unplaced(self, hosts: list[str], hostname_of: dict[str, str]) -> list[str]:
        """The hosts this tree does not place, in their order."""
        return [h for h, leaf in zip(hosts, self.leaves(hosts, hostname_of)) if leaf is None]

    def as_record(self, hosts: list[str], hostname_of: dict[str, str]) -> dict[str, Any]:
        """For the validate record: the source, each of these hosts' leaf, and what is above those leaves."""
        leaves = self.leaves(hosts, hostname_of)
        leaf_of = {h: leaf for h, leaf in zip(hosts, leaves) if leaf is not None}
        up: dict[str, list[str]] = {}
        todo = sorted(set(leaf_of.values()))
        while todo:  # each switch above these hosts' leaves, up to the top
            s = todo.pop()
            if s not in up and self.above(s):
                up[s] = list(self.above(s))
                todo += up[s]
        out: dict[str, Any] = {"source": self.source, "leaf_of": leaf_of, "up": dict(sorted(up.items()))}
        hcas = {h: self.hcas[n] for h in leaf_of for n in _names(h, hostname_of) if n in self.hcas}
        if hcas:
            out["hcas"] = hcas
        return out


def _names(host: str, hostname_of: dict[str, str]) -> list[str]:
    """The names a host may go by in a topology: as the hostfile says, the hostname its node gave, short forms."""
    name = hostname_of.get(host, host)
    return list(dict.fromkeys((host, name, name.split(".")[0], host.split(".")[0])))


def leaves_of(hosts: list[str], leaf_of: dict[str, str], hostname_of: dict[str, str]) -> list[str | None]:
    """Each host's leaf, by its hostfile name, else its hostname (short or full, as its node said); None: not in
    the topology."""
    return [next((leaf_of[x] for x in _names(h, hostname_of) if x in leaf_of), None) for h in hosts]


def _text(path: str) -> str:
    data = read_capped(path, MAX_TOPOLOGY_BYTES, "--topology", "a topology (topology.conf or ibnetdiscover's output)")
    bad = data.find(b"\0") if b"\0" in data else None
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        bad = e.start if bad is None else min(bad, e.start)
    if bad is not None:
        line = data[:bad].count(b"\n") + 1
        raise BadInput(f"--topology: {path}:{line}: not text (byte {bad}): neither Slurm's topology.conf nor "
                       "ibnetdiscover's output")
    return text


def read(path: str) -> Tree:
    """A --topology file: Slurm's topology.conf (read strictly, as slurmctld reads it) or a saved ibnetdiscover
    output (told apart by its node lines); BadInput naming the file and line of what cannot be read."""
    text = _text(path)
    if any(ibnetdiscover.NODE_LINE.match(line.strip()) for line in text.splitlines()):
        return from_ibnetdiscover(text, f"ibnetdiscover {path}", path)
    leaf_of, up = topology_conf.parse(text, path)
    return Tree(leaf_of=leaf_of, up=up, source=f"topology.conf {path}")


def from_ibnetdiscover(text: str, source: str, where: str) -> Tree:
    """ibnetdiscover's output as a Tree; BadInput naming `where` when it places no host."""
    leaf_of, up, hcas = ibnetdiscover.parse(text, where)
    return Tree(leaf_of=leaf_of, up=up, source=source, hcas=hcas, design=ib_ports.design(text),
                uplinks=ib_ports.uplinks(text))


def from_scontrol(out: str) -> Tree | None:
    """`scontrol show topology`'s answer as a Tree; None when it names no leaf; ValueError for a hostlist it
    cannot expand."""
    parsed = topology_conf.from_scontrol(out)
    return None if parsed is None else Tree(leaf_of=parsed[0], up=parsed[1], source="scontrol show topology")
