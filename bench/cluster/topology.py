"""Which leaf switch each node hangs off, from Slurm's topology.conf (its tree plugin's file).

    leaves = read("/etc/slurm/topology.conf")       # {"node01": "leaf1", ..., "node32": "leaf2"}
    expand("gpu[01-03,7]-ib")                      # ["gpu01-ib", "gpu02-ib", "gpu03-ib", "gpu7-ib"]

    SwitchName=leaf1 Nodes=node[01-16]
    SwitchName=leaf2 Nodes=node[17-32]
    SwitchName=spine Switches=leaf[1-2]

A switch with Nodes= is a leaf; one with Switches= only joins switches
(bench needs only the leaves). Names are Slurm's hostlist expressions:
a prefix, a bracket of numbers and ranges (zero padding kept), a suffix,
several joined by commas. bench validate pairs nodes across leaves and judges
a pair beside the nodes of its own leaves (bench.validate.pairing, pairs).
"""

from __future__ import annotations

import re

from bench.core.errors import BadInput

_BRACKET = re.compile(r"\[([^\]]*)\]")


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets: "a[1,2],b" -> ["a[1,2]", "b"]."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur] if p]


def expand(hostlist: str) -> list[str]:
    """A Slurm hostlist expression as names, in order; ValueError for one it cannot read."""
    out: list[str] = []
    for part in _split_top(hostlist.strip()):
        m = _BRACKET.search(part)
        if m is None:
            if "[" in part or "]" in part:
                raise ValueError(f"unbalanced brackets in {part!r}")
            out.append(part)
            continue
        head, tail = part[:m.start()], part[m.end():]
        for item in m.group(1).split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"{item!r} in {part!r} is not a number or a range")
            width = len(lo) if lo.startswith("0") else 0
            rests = expand(tail) if tail else [""]
            for k in range(int(lo), int(hi or lo) + 1):
                out += [f"{head}{k:0{width}d}{rest}" for rest in rests]
    return out


def read(path: str) -> dict[str, str]:
    """{node: its leaf switch} from a topology.conf; BadInput naming the file and line of what cannot be read."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInput(f"--topology: cannot read {path!r} ({e.strerror})") from None
    leaf_of: dict[str, str] = {}
    for no, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "SwitchName" not in fields or not ({"Nodes", "Switches"} & fields.keys()):
            raise BadInput(f"--topology: {path}:{no}: expected 'SwitchName=NAME Nodes=HOSTLIST' (or Switches=), "
                           f"got {raw.strip()!r}")
        if "Nodes" not in fields:
            continue
        try:
            names = expand(fields["Nodes"])
        except ValueError as e:
            raise BadInput(f"--topology: {path}:{no}: Nodes={fields['Nodes']}: {e}") from None
        for name in names:
            if name in leaf_of and leaf_of[name] != fields["SwitchName"]:
                raise BadInput(f"--topology: {path}:{no}: {name} is on {leaf_of[name]} already")
            leaf_of[name] = fields["SwitchName"]
    if not leaf_of:
        raise BadInput(f"--topology: {path}: no switch with Nodes= (a leaf): nothing says where a node hangs")
    return leaf_of


def leaves_of(hosts: list[str], leaf_of: dict[str, str], hostname_of: dict[str, str]) -> list[str | None]:
    """Each host's leaf, by its hostfile name, else its hostname (short or full, as its node said); None: not in
    the topology."""
    out: list[str | None] = []
    for h in hosts:
        name = hostname_of.get(h, h)
        found = [leaf_of.get(x) for x in (h, name, name.split(".")[0], h.split(".")[0])]
        out.append(next((x for x in found if x is not None), None))
    return out
