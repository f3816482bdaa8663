"""An InfiniBand fabric's leaves from `ibnetdiscover` (infiniband-diags): each HCA's switch, and what is above.

    leaf_of, up, hcas = parse(open("fabric.ibnet").read(), "fabric.ibnet")
    leaf_of["a06-p1-dgx-02-c01"]       # "A09-P1-IBLEAF-01-02": the leaf of its first HCA (HCA-1)
    hcas["a06-p1-dgx-02-c01"]          # {"HCA-1": "A09-P1-IBLEAF-01-02", "HCA-6": "A09-P1-IBLEAF-04-02"}
    up["A09-P1-IBLEAF-01-02"]          # the spines it is cabled to

The output (its man page): a block per node, `Switch N "S-<guid>" # "<node
description>" ...` or `Ca N "H-<guid>" # "<node description>"`, then one line
per cabled port: `[port] "S-<guid>"[peer port] # "<peer's description>" ...`
(a CA's port line carries its port GUID: `[1](<guid>) "S-..."[3]`). An HCA
belongs to the host its node description names: "node01 mlx5_0",
"compute-00-01 HCA-1" (rdma-ndd's "%h %d"); an HCA with the adapter's default
description ("MT4129 ConnectX7   Mellanox Technologies"), a SHARP
aggregation node or an HCA with no cable places no host. A leaf is a switch
with a host's HCA on it; the switches cabled to a leaf and one step further
from the hosts are above it, and so on up. A host whose HCAs hang off
several leaves (a rail-optimised fabric puts HCA k of every node of a unit
on leaf k) is on its first HCA's leaf, in natural order, and every HCA's
leaf is kept. A switch is named by the host name in a managed switch's
description ("MF0;A09-P1-IBLEAF-01-02:MQM9701/U1"), else by a one-word
description that no other switch has, else by ibnetdiscover's own "S-<guid>".
Lines it does not know (grouping, a tool's warning) are skipped. Pure.
"""

from __future__ import annotations

import re

from bench.cluster.hostnames import validate_hostname
from bench.core.errors import BadInput

# A node line: `Switch  36 "S-e41d2d030003e470"`, `Ca 2 "H-0002c903003421b0"`: what tells this output apart.
NODE_LINE = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"[SHR]-[0-9a-fA-F]+"')

_HEADER = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([SHR]-[0-9a-fA-F]+)"\s*(?:#\s*"(.*)")?')
_PORT = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([SHR]-[0-9a-fA-F]+)"\[(\d+)\](?:\([0-9a-fA-F]+\))?'
                   r'\s*(?:#(.*))?$')
_MANAGED = re.compile(r"^MF0;([^:;\s]+):")   # a managed switch: "MF0;<its host name>:<model>/U1"
# The device word of "<host> <device>": mlx5_0, HCA-1, mthca0, qib0, hfi1_0, bnxt_re0 (a word that ends in a digit).
_DEVICE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*[0-9]$")


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def host_and_hca(desc: str) -> tuple[str, str] | None:
    """("node01", "mlx5_0") from a node description "node01 mlx5_0"; None when it names no host."""
    words = desc.split()
    if len(words) != 2 or not _DEVICE.match(words[1]) or validate_hostname(words[0]) is not None:
        return None
    return words[0], words[1]


def _blocks(text: str) -> tuple[dict[str, str], dict[str, list[tuple[int, str]]]]:
    """({node id: its description}, {node id: [(its port, the peer node id)]}) over every block."""
    desc: dict[str, str] = {}
    links: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if (h := _HEADER.match(line)) is not None:
            current = h[2]
            desc[current] = h[3] or ""
            links.setdefault(current, [])
        elif current is not None and (p := _PORT.match(line)) is not None:
            peer = p[2]
            if peer != current:  # a switch port looped back to itself joins nothing
                links[current].append((int(p[1]), peer))
                # The peer's description, as this line gives it, for a peer whose own block is missing.
                said = re.findall(r'"([^"]*)"', p[4] or "")
                if said and peer not in desc:
                    desc[peer] = said[0]
    return desc, links


def _switch_names(switches: list[str], desc: dict[str, str]) -> dict[str, str]:
    want = {}
    for s in switches:
        m = _MANAGED.match(desc.get(s, ""))
        words = desc.get(s, "").split()
        want[s] = m[1] if m else words[0] if len(words) == 1 else s
    taken: dict[str, int] = {}
    for name in want.values():
        taken[name] = taken.get(name, 0) + 1
    return {s: name if taken[name] == 1 else s for s, name in want.items()}


def parse(text: str, where: str) -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, dict[str, str]]]:
    """({host: its leaf}, {switch: the switches above it}, {host: {HCA: its leaf}}) from ibnetdiscover's output;
    BadInput (naming `where`) when it places no host."""
    if not any(NODE_LINE.match(line.strip()) for line in text.splitlines()):
        raise BadInput(f"--topology: {where}: no 'Switch N \"S-...\"' or 'Ca N \"H-...\"' line: not "
                       "ibnetdiscover's output")
    desc, links = _blocks(text)
    # Every cable, from both ends (a block may be missing: a CA seen only from its switch's ports).
    cabled: dict[str, dict[int | None, str]] = {}
    for node, ports in links.items():
        for port, peer in ports:
            cabled.setdefault(node, {})[port] = peer
            cabled.setdefault(peer, {}).setdefault(None, node)
    switches = sorted(n for n in set(desc) | set(cabled) if n.startswith("S-"))
    names = _switch_names(switches, desc)
    hcas: dict[str, dict[str, str]] = {}
    for ca in sorted(n for n in cabled if n.startswith("H-")):
        who = host_and_hca(desc.get(ca, ""))
        ports = cabled[ca]
        up = [ports[p] for p in sorted((p for p in ports if p is not None))] + ([ports[None]] if None in ports else [])
        leaf = next((s for s in up if s.startswith("S-")), None)
        if who is not None and leaf is not None:
            hcas.setdefault(who[0], {})[who[1]] = names[leaf]
    if not hcas:
        raise BadInput(f"--topology: {where}: no HCA on a switch names its host (node descriptions like "
                       "'node01 mlx5_0'): nothing says where a node hangs")
    hcas = {h: dict(sorted(m.items(), key=lambda kv: _natural(kv[0]))) for h, m in hcas.items()}
    leaf_of = {h: next(iter(m.values())) for h, m in hcas.items()}
    return leaf_of, _above({x for m in hcas.values() for x in m.values()}, cabled, names), hcas


def _above(leaves: set[str], cabled: dict[str, dict[int | None, str]], names: dict[str, str]) -> dict[str, tuple]:
    """Each switch's neighbours one step further from the hosts (breadth first from the leaves)."""
    by_name = {v: k for k, v in names.items()}
    level = {by_name[leaf]: 0 for leaf in leaves}
    frontier = sorted(level)
    while frontier:
        nxt = []
        for s in frontier:
            for peer in cabled.get(s, {}).values():
                if peer.startswith("S-") and peer not in level:
                    level[peer] = level[s] + 1
                    nxt.append(peer)
        frontier = sorted(set(nxt))
    up: dict[str, tuple] = {}
    for s, k in level.items():
        higher = sorted({names[p] for p in cabled.get(s, {}).values() if level.get(p) == k + 1}, key=_natural)
        if higher:
            up[names[s]] = tuple(higher)
    return dict(sorted(up.items()))
