"""A second rail for a namespace-host cluster: every host gets a second interface, vb1, on a bridge of its own.

    with second_rail(cluster) as rail:      # vb1 in each host, 10.77.1.x mirroring the host's 10.77.0.x
        rail.slow(host, "200mbit")          # that host's vb1 cable held to 200 Mbit/s each way: one bad cable

Training nodes carry one NIC per GPU, each cabled to its own rail; bench's
rails check must name the one that is slow. Here rail 2 is a second bridge
and a second veth pair per host (the namespace side named vb1 on every host,
as rails are named alike on real nodes), in 10.77.1.0/24 at the same host
number as the host's 10.77.0.x: the cluster's own /28 slot, so clusters of
other tests never share it. Everything made here is removed on exit (the
namespace sides go with the root sides).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field

from .netns import Cluster, _no_ipv6, _run

IFNAME = "vb1"


@dataclass
class Rail:
    cluster: Cluster
    bridge: str
    veths: dict[str, str] = field(default_factory=dict)  # host -> its rail-2 veth's root side
    addrs: dict[str, str] = field(default_factory=dict)  # host -> its vb1 address

    def slow(self, host: str, rate: str = "200mbit") -> None:
        """A token bucket on the host's rail-2 cable, both ends of its veth pair (this kernel has no netem): a link
        that trained down, or a bad cable's retransmits."""
        tbf = ["root", "tbf", "rate", rate, "burst", "64kbit", "latency", "400ms"]
        _run(["tc", "qdisc", "add", "dev", self.veths[host], *tbf])
        _run(["ip", "netns", "exec", self.cluster.ns_of(host), "tc", "qdisc", "add", "dev", IFNAME, *tbf])


def _mirror(addr: str) -> str:
    """10.77.0.N -> 10.77.1.N"""
    a = ipaddress.ip_address(addr).packed
    return str(ipaddress.ip_address(bytes([a[0], a[1], a[2] + 1, a[3]])))


@contextlib.contextmanager
def second_rail(c: Cluster) -> Iterator[Rail]:
    bits = c.subnet.split("/")[1]
    rail = Rail(c, f"{c.prefix}r1")
    try:
        _run(["ip", "link", "add", rail.bridge, "type", "bridge"])
        _no_ipv6(rail.bridge)
        _run(["ip", "addr", "add", f"{_mirror(c.bridge_addr)}/{bits}", "dev", rail.bridge])
        _run(["ip", "link", "set", rail.bridge, "up"])
        for i, (host, ns) in enumerate(zip(c.hosts, c.namespaces)):
            veth = rail.veths[host] = f"{c.prefix}s{i}"
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", IFNAME, "netns", ns])
            _no_ipv6(veth)
            _no_ipv6(IFNAME, ns)
            _run(["ip", "link", "set", veth, "master", rail.bridge, "up"])
            rail.addrs[host] = _mirror(host)
            _run(["ip", "-n", ns, "addr", "add", f"{rail.addrs[host]}/{bits}", "dev", IFNAME])
            _run(["ip", "-n", ns, "link", "set", IFNAME, "up"])
        yield rail
    finally:
        for veth in rail.veths.values():
            _run(["ip", "link", "del", veth], check=False)
        _run(["ip", "link", "del", rail.bridge], check=False)
