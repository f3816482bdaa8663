"""DeepSpeed hostfiles and --include/--exclude/--num-nodes/--gpus -> resources (HostSelection).

A hostfile, as DeepSpeed's launcher reads it:

    # '#' starts a comment, on its own line or after an entry
    worker-0 slots=4
    worker-1 slots=4   # slots = accelerators (or CPU ranks) on that host

    hosts = parse_hostfile("hostfiles/tesla")           # {"tesla-node1": 1, ...}
    resolve_resources(hosts, exclude="tesla-node5")      # {"tesla-node1": [0], ...}
    resolve_resources({"w0": 4, "w1": 4}, include="w0@w1:0,2")   # {"w0": [0,1,2,3], "w1": [0,2]}

The format and the filter semantics follow deepspeed/launcher/runner.py
(0.19.8: fetch_hostfile, _parse_hostfile, parse_resource_filter,
parse_inclusion_exclusion, apply_num_nodes_and_gpus) and
tests/unit/test_hostfile.py checks agreement against it. Where DeepSpeed is
unsafe, crashes or silently does something other than asked, this module
refuses with a BadInput instead; each such place says "Differs from
DeepSpeed". Every host name is validated before it can reach ssh, pdsh or
mpirun: DeepSpeed accepts `-oProxyCommand=... slots=1` as a host and its ssh
check then runs the command.

Pure: no torch, no subprocess, no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.cluster.hostnames import validate_hostname
from bench.core.capped import read_capped
from bench.core.errors import BadInput
from bench.core.options import flag_of, opt

_DIGITS = re.compile(r"[0-9]+\Z")

# A hostfile is a few lines; a bigger file is a wrong path (a dataset, /dev/zero).
MAX_HOSTFILE_BYTES = 1 << 20
# No node has more accelerators (or ranks) than this; a larger count is a typo,
# and range(slots) of a huge one would exhaust memory.
MAX_SLOTS = 4096

def _quote(text: str, limit: int = 80) -> str:
    """repr() of user text for a one-line message: escapes control characters, truncated."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_hostfile(path: str) -> dict[str, int]:
    """Read a DeepSpeed hostfile: {host: slots} in hostfile order.

    Differs from DeepSpeed: a missing hostfile is an error. DeepSpeed warns
    and runs on localhost, so a mistyped path would benchmark one machine and
    label it a cluster.
    """
    data = read_capped(path, MAX_HOSTFILE_BYTES, "--hostfile", "a hostfile")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise BadInput(f"{path}:{line}: not UTF-8 text") from None
    return parse_hostfile_text(text, path)


def parse_hostfile_text(text: str, source: str) -> dict[str, int]:
    """Parse hostfile text; `source` names it in errors (`source:line: reason`).

    Differs from DeepSpeed, whose regex `^(\\S+)\\s+slots=(\\d+)` only looks at
    the start of a line: it takes `node slots=4x` as 4 slots, ignores any
    extra words, accepts slots=0, and accepts any word as a host. Here each of
    those is an error. Differs from DeepSpeed also in comparing duplicates
    ignoring case, as DNS does: "Node1" and "node1" are one machine.
    """
    hosts: dict[str, int] = {}
    first_seen: dict[str, tuple[str, int]] = {}
    # split("\n"), not splitlines(): line numbers must match what an editor shows.
    for lineno, raw in enumerate(text.split("\n"), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        where = f"{source}:{lineno}"
        tokens = content.split()
        host = tokens[0]
        reason = validate_hostname(host)
        if reason:
            raise BadInput(f"{where}: bad host name {_quote(host)}: {reason}")
        if len(tokens) == 1:
            raise BadInput(f"{where}: missing slots=N after host {host!r}")
        key, eq, value = tokens[1].partition("=")
        if key != "slots" or not eq:
            raise BadInput(f"{where}: expected slots=N after host {host!r}, found {_quote(tokens[1])}")
        if not _DIGITS.match(value):
            raise BadInput(f"{where}: bad slot count {_quote(value)} for host {host!r}: not a whole number")
        slots = int(value)
        if slots <= 0 or slots > MAX_SLOTS:
            raise BadInput(f"{where}: bad slot count {slots} for host {host!r}: must be 1..{MAX_SLOTS}")
        if len(tokens) > 2:
            raise BadInput(f"{where}: unexpected {_quote(tokens[2])} after slots={value} (one 'host slots=N' per line)")
        if host.lower() in first_seen:
            prev, prev_line = first_seen[host.lower()]
            raise BadInput(f"{where}: duplicate host {host!r} (first as {prev!r} on line {prev_line})")
        first_seen[host.lower()] = (host, lineno)
        hosts[host] = slots
    if not hosts:
        raise BadInput(f"{source}: no hosts in hostfile (only blank lines and comments)")
    return hosts


def _parse_node(part: str, option: str, spec: str) -> tuple[str, list[int] | None]:
    """One NODE_SPEC, NAME[:SLOT[,SLOT...]] -> (host, slots or None for the whole host).

    Differs from DeepSpeed, which split(':')s and so crashes on an IPv6 host:
    here an IPv6 host is written [addr] or [addr]:0,1.
    """
    if not part:
        raise BadInput(f"{option}: empty host in {_quote(spec)}")
    slot_text: str | None
    if part.startswith("["):
        end = part.find("]")
        if end < 0:
            raise BadInput(f"{option}: unclosed '[' in {_quote(part)}")
        host, rest = part[1:end], part[end + 1 :]
        if rest and not rest.startswith(":"):
            raise BadInput(f"{option}: unexpected {_quote(rest)} after ']' in {_quote(part)}")
        slot_text = rest[1:] if rest else None
    elif part.count(":") > 1:
        raise BadInput(f"{option}: write the IPv6 host in {_quote(part)} as [address] or [address]:slots")
    elif ":" in part:
        host, slot_text = part.split(":")
    else:
        host, slot_text = part, None
    reason = validate_hostname(host)
    if reason:
        raise BadInput(f"{option}: bad host name {_quote(host)}: {reason}")
    if slot_text is None:
        return host, None
    slots = []
    for s in slot_text.split(","):
        if not _DIGITS.match(s):
            raise BadInput(f"{option}: bad slot {_quote(s)} for host {host!r}: not a whole number")
        slots.append(int(s))
    return host, slots


def _parse_spec(spec: str, option: str) -> dict[str, list[int] | None]:
    """NODE_SPEC[@NODE_SPEC...] -> {host: sorted unique slots, or None = whole host}."""
    nodes: dict[str, list[int] | None] = {}
    for part in spec.split("@"):
        host, slots = _parse_node(part, option, spec)
        if host not in nodes:
            nodes[host] = slots
        elif (nodes[host] is None) != (slots is None):
            # Differs from DeepSpeed: it concatenates the slot lists, so
            # "w0@w0:1" silently means only slot 1 of w0. Ambiguous: refuse.
            raise BadInput(f"{option}: host {host!r} is named both whole and with slots in {_quote(spec)}")
        elif slots is not None:
            nodes[host] = [*nodes[host], *slots]  # type: ignore[misc]
    return {h: (sorted(set(s)) if s is not None else None) for h, s in nodes.items()}


def _known(hosts: dict[str, int]) -> str:
    names = list(hosts)
    return ", ".join(names[:6]) + (f", ... ({len(names)} hosts)" if len(names) > 6 else "")


def resolve_resources(
    hosts: dict[str, int],
    include: str = "",
    exclude: str = "",
    num_nodes: int = -1,
    num_gpus: int = -1,
) -> dict[str, list[int]]:
    """{host: slots} -> {host: [slot ids]} after the filters, in hostfile order.

    include/exclude: "host[:slot,slot][@host...]", mutually exclusive, as in
    DeepSpeed. num_nodes keeps the first N hosts, num_gpus the first N slots
    of each; both exclude include/exclude, as in DeepSpeed. A negative count
    means "not given".
    """
    if include and exclude:
        raise BadInput("--exclude: cannot be combined with --include (give one of them)")
    if (num_nodes >= 0 or num_gpus >= 0) and (include or exclude):
        opt = "--num-nodes" if num_nodes >= 0 else "--gpus"
        raise BadInput(f"{opt}: cannot be combined with --include/--exclude")
    active = {h: list(range(n)) for h, n in hosts.items()}
    if include or exclude:
        option, spec = ("--include", include) if include else ("--exclude", exclude)
        active = _filter(hosts, active, _parse_spec(spec, option), option, keep=bool(include))
    if num_nodes >= 0:
        # Differs from DeepSpeed: it treats 0 as "all" and a count past the
        # hostfile as "all there are"; a benchmark labelled N nodes must run on N.
        if num_nodes == 0:
            raise BadInput("--num-nodes: must be at least 1")
        if num_nodes > len(active):
            raise BadInput(f"--num-nodes: {num_nodes} asked but the hostfile lists {len(active)} host(s)")
        active = dict(list(active.items())[:num_nodes])
    if num_gpus >= 0:
        # Differs from DeepSpeed: it hands every host range(num_gpus) even when
        # the host has fewer slots, so ranks would be placed on GPUs that do not exist.
        if num_gpus == 0:
            raise BadInput("--gpus: must be at least 1")
        for host, slots in active.items():
            if num_gpus > len(slots):
                raise BadInput(f"--gpus: {num_gpus} asked but host {host!r} has {len(slots)} slot(s)")
        active = {h: s[:num_gpus] for h, s in active.items()}
    return active


def _filter(
    hosts: dict[str, int],
    active: dict[str, list[int]],
    requested: dict[str, list[int] | None],
    option: str,
    keep: bool,
) -> dict[str, list[int]]:
    for host, slots in requested.items():
        if host not in hosts:
            raise BadInput(f"{option}: unknown host {host!r} (hostfile has: {_known(hosts)})")
        for s in slots or []:
            if s >= hosts[host]:
                raise BadInput(f"{option}: host {host!r} has no slot {s} (it has slots 0-{hosts[host] - 1})")
    out: dict[str, list[int]] = {}
    for host, slots in active.items():  # hostfile order, as DeepSpeed keeps it
        if host in requested:
            req = requested[host]
            if keep:
                out[host] = slots if req is None else req
            elif req is not None:
                rest = [s for s in slots if s not in req]
                if rest:
                    out[host] = rest
        elif not keep:
            out[host] = slots
    if not out:
        # Differs from DeepSpeed, which goes on with no hosts and dies on an IndexError.
        raise BadInput(f"{option}: leaves no slots to run on")
    return out


GROUP = "hosts (DeepSpeed hostfile and filters)"


@dataclass(frozen=True, kw_only=True, slots=True)
class HostSelection:
    """Which hosts and slots a command runs on: a hostfile and DeepSpeed's filters (None: this machine)."""

    hostfile: str | None = opt("DeepSpeed hostfile of 'host slots=N' lines; default: this machine only",
                               default=None, metavar="FILE", group=GROUP)
    include: str = opt("use only these hosts/slots: host[:slot,slot][@host...], e.g. worker-0@worker-1:0,2",
                       default="", metavar="SPEC", group=GROUP)
    exclude: str = opt("use all but these hosts/slots (same format; not with --include), e.g. worker-1:0",
                       default="", metavar="SPEC", group=GROUP)
    num_nodes: int | None = opt("use the first N hosts (default: all)", default=None, metavar="N", group=GROUP)
    num_gpus: int | None = opt("use the first N slots of every host, as bench run's --gpus (default: all)",
                               default=None, metavar="N", group=GROUP, flag="--gpus", aliases=("--num-gpus",))

    def __post_init__(self) -> None:
        for name in ("num_nodes", "num_gpus"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BadInput(f"{flag_of(HostSelection, name)}: must be at least 1")

    def resources(self, local_hosts: dict[str, int] | None = None) -> dict[str, list[int]] | None:
        """The resources this selects; None when no hostfile was given and no local_hosts either.

        With no hostfile, a caller that knows this machine's slots passes
        local_hosts (e.g. {"localhost": 2}) and gets the filters applied to it,
        as DeepSpeed does for `deepspeed --include localhost:1`.
        """
        num_nodes = -1 if self.num_nodes is None else self.num_nodes
        num_gpus = -1 if self.num_gpus is None else self.num_gpus
        if self.hostfile is None:
            if local_hosts is None:
                for option, given in (("--include", self.include), ("--exclude", self.exclude),
                                      ("--num-nodes", num_nodes >= 0)):
                    if given:
                        raise BadInput(f"{option}: needs --hostfile")
                return None
            hosts = local_hosts
        else:
            hosts = parse_hostfile(self.hostfile)
        return resolve_resources(hosts, self.include, self.exclude, num_nodes, num_gpus)

    def only(self, resources: dict[str, list[int]]) -> "HostSelection":
        """The same hostfile, narrowed to exactly these hosts and slots (an --include spec)."""
        return HostSelection(hostfile=self.hostfile, include=include_spec(resources))


def include_spec(resources: dict[str, list[int]]) -> str:
    """{host: slots} as DeepSpeed's --include spec: "h1:0,1@h2:0"."""
    return "@".join(f"{h}:{','.join(map(str, slots))}" for h, slots in resources.items())
