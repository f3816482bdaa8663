"""Leaf switches for a namespace-host cluster: its hosts split over leaf bridges, each joined to a spine by one uplink.

    with leaves(cluster, 3) as fab:          # 6 hosts -> node1-2 on leaf1, node3-4 on leaf2, node5-6 on leaf3
        fab.topology                         # a topology.conf that says so (Slurm's tree plugin's format)
        with fab.slow("leaf1", "200mbit"):   # leaf1's one uplink held to 200 Mbit/s both ways, removed on exit
            ...

A real cluster's nodes hang off leaf switches, and the leaves off spines:
two nodes of one leaf reach each other through that leaf alone, nodes of
two leaves through both leaves' uplinks. Here the cluster's own bridge (the
one netns.build_cluster made, with the head's address on it) becomes the
spine: each host's cable moves to a leaf bridge of its own, and each leaf
bridge is joined to the spine by one veth pair, its uplink. Addresses do not
change (one /28, one L2 segment, the cluster's own slot of 10.77.0.0/24), so
the hosts still reach each other and the head (bench's hub, ssh) as before,
across their leaf's uplink. A token bucket on both ends of one uplink (this
kernel has no netem) slows every pair that crosses it, both ways, and no
pair inside a leaf.

Every link made here is named from the cluster's prefix (netns.clean_stale
removes a dead run's leftovers) and removed on exit; the hosts' cables go
back to the cluster's bridge, so the cluster is whole again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .netns import Cluster, _no_ipv6, _run


@dataclass
class Fabric:
    cluster: Cluster
    leaf_of: dict[str, str] = field(default_factory=dict)       # host address -> its leaf switch's name
    bridges: dict[str, str] = field(default_factory=dict)       # leaf -> its bridge
    uplinks: dict[str, tuple[str, str]] = field(default_factory=dict)  # leaf -> (its side, the spine's side)
    topology: Path | None = None

    def hosts_of(self, leaf: str) -> list[str]:
        return [h for h, x in self.leaf_of.items() if x == leaf]

    @contextlib.contextmanager
    def slow(self, leaf: str, rate: str = "200mbit") -> Iterator[None]:
        """The leaf's uplink held to `rate` both ways: a token bucket on each end of its veth pair (a bad spine
        cable, a port that trained down); removed on leaving, whatever happened."""
        ends = self.uplinks[leaf]
        try:
            for end in ends:
                _run(["tc", "qdisc", "replace", "dev", end, "root", "tbf", "rate", rate, "burst", "32kb",
                      "latency", "100ms"])
            yield
        finally:
            for end in ends:
                _run(["tc", "qdisc", "del", "dev", end, "root"], check=False)

    @contextlib.contextmanager
    def slow_host(self, host: str, rate: str = "200mbit") -> Iterator[None]:
        """One host's traffic across its leaf's uplink held to `rate` both ways, its leaf's other traffic not (the
        uplink it routes through, with static routing): on each end of the uplink's veth pair an htb whose default
        class is unlimited and whose limited class takes the host's packets (leaving the leaf: from it; entering:
        to it); its pairs inside the leaf never cross the uplink. Removed on leaving, whatever happened."""
        ends = self.uplinks[self.leaf_of[host]]
        try:
            for end, side in zip(ends, ("src", "dst")):
                _run(["tc", "qdisc", "replace", "dev", end, "root", "handle", "1:", "htb", "default", "10"])
                _run(["tc", "class", "add", "dev", end, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"])
                _run(["tc", "class", "add", "dev", end, "parent", "1:", "classid", "1:20", "htb", "rate", rate])
                _run(["tc", "filter", "add", "dev", end, "parent", "1:", "protocol", "ip", "u32", "match", "ip", side,
                      f"{host}/32", "flowid", "1:20"])
            yield
        finally:
            for end in ends:
                _run(["tc", "qdisc", "del", "dev", end, "root"], check=False)

    def qdiscs(self, leaf: str) -> list[str]:
        """What each end of the leaf's uplink queues by (`tc qdisc show`), to show the limit is there, or gone."""
        return [_run(["tc", "qdisc", "show", "dev", end]).stdout.strip() for end in self.uplinks[leaf]]


def _topology_conf(c: Cluster, fab: Fabric, spine: str) -> str:
    lines = [f"SwitchName={leaf} Nodes={','.join(c.hostnames[c.hosts.index(h)] for h in fab.hosts_of(leaf))}\n"
             for leaf in fab.bridges]
    # Slurm refuses a bracket of letters in Switches= (leaf[a-c]); commas it takes.
    lines.append(f"SwitchName={spine} Switches={','.join(fab.bridges)}\n")
    return "".join(lines)


@contextlib.contextmanager
def leaves(c: Cluster, n: int = 3, spine: str = "spine") -> Iterator[Fabric]:
    """The cluster's hosts in n leaves of consecutive hosts (as equal as the count allows), each leaf bridge joined to
    the cluster's bridge (the spine) by one veth pair; a topology.conf naming the hosts by hostname."""
    if not 1 <= n <= min(9, len(c.hosts)):
        raise ValueError(f"1..{min(9, len(c.hosts))} leaves for {len(c.hosts)} hosts, not {n}")
    fab = Fabric(c)
    names = [f"leaf{k + 1}" for k in range(n)]
    for i, host in enumerate(c.hosts):
        fab.leaf_of[host] = names[i * n // len(c.hosts)]
    try:
        for k, leaf in enumerate(names, 1):
            # Two characters past the prefix: it may be 13 long (a 7-digit PID, slot 15) and names stop at 15.
            bridge, up, down = f"{c.prefix}l{k}", f"{c.prefix}u{k}", f"{c.prefix}p{k}"
            _run(["ip", "link", "add", bridge, "type", "bridge"])
            fab.bridges[leaf] = bridge
            _no_ipv6(bridge)
            _run(["ip", "link", "add", up, "type", "veth", "peer", "name", down])
            fab.uplinks[leaf] = (up, down)
            for link, master in ((up, bridge), (down, c.bridge)):
                _no_ipv6(link)
                _run(["ip", "link", "set", link, "master", master, "up"])
            _run(["ip", "link", "set", bridge, "up"])
        for host, leaf in fab.leaf_of.items():
            _run(["ip", "link", "set", c.veth_of(host), "master", fab.bridges[leaf]])
        fab.topology = c.tmp / "topology.conf"
        fab.topology.write_text(_topology_conf(c, fab, spine))
        yield fab
    finally:
        for host in fab.leaf_of:
            _run(["ip", "link", "set", c.veth_of(host), "master", c.bridge], check=False)
        for up, _ in fab.uplinks.values():
            _run(["ip", "link", "del", up], check=False)  # its peer goes with it
        for bridge in fab.bridges.values():
            _run(["ip", "link", "del", bridge], check=False)
