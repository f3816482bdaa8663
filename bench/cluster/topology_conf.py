"""Slurm's topology.conf, read as slurmctld and slurmd read it, and `scontrol show topology`'s answer.

    leaf_of, up = parse(text, "/etc/slurm/topology.conf")   # BadInput "FILE:LINE: ..." where Slurm would refuse
    leaf_of, up = from_scontrol(out)    # `scontrol show topology` (its Level=0 switches are the leaves)

{node: its leaf switch} and {switch: the switches above it}: bench.cluster.topology makes a Tree of them.

The file's grammar is Slurm's config parser's (src/common/parse_config.c):
keys case-insensitive, `Key=value` or `Key="value with spaces"`, an
unescaped "#" starts a comment, a line ending in "\\" goes on on the next,
"\\x" is x, `Include FILE` reads FILE (beside this one unless absolute).
Each line is `SwitchName=NAME` with `Nodes=HOSTLIST` (a leaf) or
`Switches=HOSTLIST` (its children), and `LinkSpeed=N`
(src/plugins/topology/tree). Refused, with the file and line, as
slurmctld 22.05 and later refuse it (fatal): a line that is not `key=value`
pairs, a key it does not know, a LinkSpeed that is not a number, a switch
named twice, one with both Nodes= and Switches= or neither, a name over 64
characters, a hostlist Slurm cannot read (`Switches=leaf[a-c]`: "Invalid
switches"), a child that is not a switch or is itself, a loop, and a file
with no leaf. Slurm only warns where a node hangs off two leaves; bench,
which judges a pair by its nodes' leaves, refuses that too.
"""

from __future__ import annotations

import os
import re

from bench.cluster.hostlist import expand
from bench.core.capped import read_capped
from bench.core.errors import BadInput

Parsed = tuple[dict[str, str], dict[str, tuple[str, ...]]]

# Slurm's keyvalue_pattern: a key, an optional operator, "=", a quoted value or one without white space.
_KV = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_INCLUDE = re.compile(r"include\s", re.IGNORECASE)
HOST_NAME_MAX = 64   # slurm.h: SwitchName must be shorter (topology/tree refuses it, Slurm 23.02 on)
MAX_INCLUDES = 16    # Slurm has no limit; a file that includes itself would recurse forever
MAX_INCLUDE_BYTES = 64 << 20  # as a --topology file (bench.cluster.topology): more is a wrong path
MAX_DEPTH = 20       # Slurm: "Switch configuration is not a tree" past 20 levels


def _strip_comment(line: str) -> str:
    """Up to the first "#" not escaped by an odd number of backslashes (Slurm's _strip_comments)."""
    run = 0
    for i, ch in enumerate(line):
        if ch == "#" and run % 2 == 0:
            return line[:i]
        run = run + 1 if ch == "\\" else 0
    return line


def _continued(line: str) -> str | None:
    """The line without its continuation backslash, or None when it does not go on (Slurm's
    _strip_continuation: an odd run of backslashes last, white space after it ignored)."""
    body = line.rstrip()
    run = len(body) - len(body.rstrip("\\"))
    return body[:-1] if run % 2 else None


def _unescape(line: str) -> str:
    return re.sub(r"\\(.)", r"\1", line, flags=re.DOTALL)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, the line joined and unescaped) as Slurm's _get_next_line gives them."""
    out, raw, i = [], text.split("\n"), 0
    while i < len(raw):
        start, buf = i + 1, ""
        while i < len(raw):
            line = _strip_comment(raw[i])
            i += 1
            more = _continued(line)
            if more is None:
                buf += line
                break
            buf += more
        out.append((start, _unescape(buf)))
    return out


def _uint32(value: str) -> int | None:
    """Slurm's s_p_handle_uint32: C's strtoul base 0 (0x hex, 0 octal), a k suffix (x1024), UNLIMITED."""
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return 0xFFFFFFFE
    m = re.fullmatch(r"\+?(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))([kK]?)", value)
    if not m:
        return None
    n = int(m[1], 16) if m[1] else int(m[2], 8) if m[2] else int(m[3])
    n *= 1024 if m[4] else 1
    return n if n <= 0xFFFFFFFF else None


class _Switch:
    def __init__(self, name: str, where: str):
        self.name, self.where = name, where
        self.nodes: str | None = None
        self.switches: str | None = None


def _parse_line(line: str, where: str) -> _Switch | None:
    """One logical line: a switch, or None for a blank one; BadInput for what Slurm's parser rejects."""
    if not line.strip():
        return None
    m = _KV.match(line)
    if m is None:
        raise BadInput(f"--topology: {where}: expected 'SwitchName=NAME Nodes=HOSTLIST' (or Switches=), got "
                       f"{line.strip()[:80]!r}")
    if m[1].lower() != "switchname":
        raise BadInput(f"--topology: {where}: unknown key {m[1]!r} (a line starts with SwitchName=)")
    sw = _Switch(m[3] if m[3] is not None else m[4], where)
    rest = line[m.end():]
    while (m := _KV.match(rest)) is not None:
        key, value = m[1].lower(), m[3] if m[3] is not None else m[4]
        if key == "linkspeed" and _uint32(value) is None:
            raise BadInput(f"--topology: {where}: LinkSpeed={value}: not a number from 0 to 4294967295")
        if key not in ("linkspeed", "nodes", "switches"):
            raise BadInput(f"--topology: {where}: unknown key {m[1]!r} (a switch has Nodes=, Switches=, LinkSpeed=)")
        if key != "linkspeed":
            setattr(sw, key, value)  # given twice: Slurm keeps the last
        rest = rest[m.end():]
    if rest.strip():
        raise BadInput(f"--topology: {where}: cannot read {rest.strip()[:80]!r} (expected KEY=VALUE)")
    if not sw.name or len(sw.name) > HOST_NAME_MAX:
        raise BadInput(f"--topology: {where}: SwitchName={sw.name!r}: must be 1 to {HOST_NAME_MAX} characters")
    if sw.nodes is not None and sw.switches is not None:
        raise BadInput(f"--topology: {where}: switch {sw.name} has both Nodes= and Switches= (Slurm refuses it)")
    if sw.nodes is None and sw.switches is None:
        raise BadInput(f"--topology: {where}: switch {sw.name} has neither Nodes= nor Switches= (Slurm refuses it)")
    return sw


def _switches(text: str, path: str, depth: int = 0) -> list[_Switch]:
    out: list[_Switch] = []
    for no, line in logical_lines(text):
        where = f"{path}:{no}"
        if _INCLUDE.match(line):
            words = line[7:].split()
            if len(words) != 1 or depth >= MAX_INCLUDES:
                raise BadInput(f"--topology: {where}: Include takes one file (and {MAX_INCLUDES} levels at most)")
            name = words[0]
            inc = name if os.path.isabs(name) else os.path.join(os.path.dirname(path), name)
            try:
                sub = read_capped(inc, MAX_INCLUDE_BYTES, f"--topology: {where}: Include", "a topology.conf").decode()
            except UnicodeDecodeError as e:
                raise BadInput(f"--topology: {where}: Include {name}: cannot read it ({e})") from None
            out += _switches(sub, inc, depth + 1)
        elif (sw := _parse_line(line, where)) is not None:
            out.append(sw)
    return out


def _names(sw: _Switch, what: str) -> list[str]:
    try:
        return expand(getattr(sw, what.lower()))
    except ValueError as e:
        raise BadInput(f"--topology: {sw.where}: {what}={getattr(sw, what.lower())}: {e} (Slurm: \"Invalid "
                       f"{'node name' if what == 'Nodes' else 'switches'}\")") from None


def parse(text: str, path: str) -> Parsed:
    """A topology.conf's leaves and what is above; BadInput "--topology: FILE:LINE: why" where slurmctld would
    refuse it."""
    switches = _switches(text, path)
    if not switches:
        raise BadInput(f"--topology: {path}: no SwitchName line (Slurm: \"No switches configured\")")
    by_name: dict[str, _Switch] = {}
    for sw in switches:
        if sw.name in by_name:
            raise BadInput(f"--topology: {sw.where}: switch {sw.name} is defined already at {by_name[sw.name].where}")
        by_name[sw.name] = sw
    leaf_of: dict[str, str] = {}
    leaf_at: dict[str, str] = {}
    up: dict[str, list[str]] = {}
    for sw in switches:
        if sw.nodes is not None:
            for node in _names(sw, "Nodes"):
                if leaf_of.get(node, sw.name) != sw.name:
                    raise BadInput(f"--topology: {sw.where}: {node} is on {leaf_of[node]} already "
                                   f"({leaf_at[node]}): bench needs one leaf per node")
                leaf_of[node], leaf_at[node] = sw.name, sw.where
            continue
        for child in _names(sw, "Switches"):
            if child not in by_name or child == sw.name:
                raise BadInput(f"--topology: {sw.where}: switch {sw.name} has an invalid child {child!r} (not a "
                               "switch of this file, or itself)")
            up.setdefault(child, [])
            if sw.name not in up[child]:
                up[child].append(sw.name)
    _no_loop(up, by_name)
    if not leaf_of:
        raise BadInput(f"--topology: {path}: no switch with Nodes= (a leaf): nothing says where a node hangs")
    return leaf_of, {k: tuple(v) for k, v in up.items()}


def _no_loop(up: dict[str, list[str]], by_name: dict[str, _Switch]) -> None:
    """Every switch reaches the top within MAX_DEPTH steps up (Slurm: "Switch configuration is not a tree")."""
    level: dict[str, int] = {}

    def height(s: str, seen: tuple[str, ...]) -> int:
        if s in seen or len(seen) > MAX_DEPTH:
            raise BadInput(f"--topology: {by_name[s].where}: switch {s} is above itself "
                           f"({' < '.join((*seen, s))}): not a tree")
        if s not in level:
            level[s] = 1 + max((height(p, (*seen, s)) for p in up.get(s, ())), default=0)
        return level[s]

    for s in by_name:
        height(s, ())


def from_scontrol(out: str) -> Parsed | None:
    """`scontrol show topology` (topology/tree): its leaves and what is above, or None when it names no leaf;
    ValueError for a hostlist it cannot expand. Every switch lists the nodes below it; Level=0's are leaves."""
    leaf_of: dict[str, str] = {}
    up: dict[str, list[str]] = {}
    seen = False
    for line in out.splitlines():
        if not line.startswith("SwitchName="):
            continue
        seen = True
        f = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        name = f["SwitchName"]
        if f.get("Level") == "0" and f.get("Nodes"):
            for node in expand(f["Nodes"]):
                leaf_of.setdefault(node, name)  # on two leaves (Slurm warns): the first
        for child in expand(f.get("Switches", "")):
            up.setdefault(child, []).append(name)
    if not seen or not leaf_of:
        return None
    return leaf_of, {k: tuple(v) for k, v in up.items()}
