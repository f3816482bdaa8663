"""IMEX (NVIDIA's memory export daemon across an NVLink domain's nodes) from `nvidia-imex-ctl -N`, judged only
where a node's GPUs are in a multi-node NVLink domain.

    from bench.cluster.accel.nvidia.imex import parse, findings
    s = parse(open("nvidia-imex-ctl.txt").read())   # Imex(nodes=[(0, "10.136.206.47", "READY"), ...], ...)
    findings(s, fabric)                              # [finding]; fabric: the report's "fabric" (fabric_state)

`nvidia-imex-ctl -N` prints the nodes of its domain ("Node #0 - <address> -
READY"), a From\\To table of connection states (C connected; N never, I
invalid, R recovering, D disconnected, A authenticating) and "Domain State:
UP". Saving its output is the site saying it uses IMEX. A node none of whose
GPUs is in a multi-node domain (a single-node NVSwitch system: clique 0, no
ClusterUUID) is not judged: that is the false IMEX failure NVSentinel #1471
and DCGM #308 report on single-node HGX and idle GB300 nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.cluster.findings import finding

SOURCE = "nvidia-imex-ctl"
_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)")


@dataclass
class Imex:
    nodes: list[tuple[int, str, str]] = field(default_factory=list)   # (number, address, state)
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # (from, to) -> "C", "N", ...
    domain_state: str | None = None


def parse(text: str) -> Imex:
    s, head = Imex(), None
    for line in text.splitlines():
        if m := _NODE.match(line.strip()):
            s.nodes.append((int(m.group(1)), m.group(2), m.group(3).upper()))
        elif m := re.match(r"^\s*Domain State:\s*(\S+)", line):
            s.domain_state = m.group(1).upper()
        elif "From\\To" in line:
            head = [int(x) for x in line.split("From\\To", 1)[1].split()]
        elif head is not None and re.match(r"^\s*\d+\s+[A-Z](\s+[A-Z])*\s*$", line):
            row, *cells = line.split()
            s.links.update({(int(row), to): c for to, c in zip(head, cells)})
    return s


def findings(s: Imex, fabric: list[dict] | None) -> tuple[list[dict], str]:
    """(the findings, what was read); nothing is judged on a node in no multi-node NVLink domain."""
    said = (f"domain {s.domain_state or '?'}, {len(s.nodes)} node(s) "
            f"({sum(st == 'READY' for _, _, st in s.nodes)} READY)")  # fmt: skip
    if fabric is not None and not any(g.get("cluster_uuid") or g.get("clique_id") for g in fabric):
        return [], said + "; not judged: no GPU of this node is in a multi-node NVLink domain"
    out = []
    if s.domain_state != "UP":
        out.append(finding("imex-domain-down", SOURCE, f"IMEX Domain State: {s.domain_state or 'not printed'}"))
    for n, address, state in s.nodes:
        if state != "READY":
            out.append(finding("imex-node-not-ready", SOURCE, f"IMEX node #{n} ({address}): {state}"))
    down = sorted((a, b, c) for (a, b), c in s.links.items() if c != "C")
    if down:
        out.append(finding("imex-not-connected", SOURCE, "IMEX connections not C (connected): " +
                           ", ".join(f"#{a}->#{b} {c}" for a, b, c in down)))  # fmt: skip
    return out, said
