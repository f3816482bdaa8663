"""The kind of link between a node's GPUs (intra) and from the node to the others (inter).

    from bench.cluster.linkkind import classify
    kinds = classify(gpus, topo, nvlink, ib_ports, net_ifaces, ifname="eth0")
    kinds["intra"]["kind"], kinds["inter"]["kind"]          # 'nvswitch', 'infiniband'

Inputs are the parsers' results (bench.cluster.interconnect), so recorded outputs give the same
answer as a live node. Between two GPUs or more the GPUs' backend says the kind
(bench.cluster.accel: Accelerator.intra; NVIDIA's in bench.cluster.accel.nvidia.intra).
intra kinds: nvswitch (every GPU pair NVLinked with more links than a GPU
has: through switches), nvlink (direct NVLink: a full or partial mesh, a bridge), pcie (no NVLink
between the GPUs), shared-memory (no GPU: CPU ranks on one node), none (one GPU: nothing to reduce
across), unknown (the matrix could not be read). inter kinds: infiniband and roce (RDMA ports
Active and LinkUp: NCCL uses them before any socket), ethernet (a physical interface: TCP
sockets), virtual (lo, veth, bridge: devices under /sys/devices/virtual, whose nominal speed,
10000 Mb/s for a veth, is no line rate), unknown.
"""

from __future__ import annotations

from collections import Counter

from bench.cluster import accel
from bench.cluster.accel.base import intra_result

ARPHRD_INFINIBAND, ARPHRD_LOOPBACK = 32, 772


def classify(gpus: list[dict], topo: dict | None, nvlink: dict | None, ib_ports: list[dict], net_ifaces: list[dict],
             ifname: str | None = None, *, pcie: dict | None = None, ib_disabled: bool = False) -> dict:  # fmt: skip
    """{"intra": {...}, "inter": {...}}; ifname is NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME when the job sets one."""
    return {"intra": _intra(gpus, topo, nvlink, pcie or {}),
            "inter": _inter(gpus, ib_ports, net_ifaces, ifname, ib_disabled)}


def _intra(gpus: list[dict], topo: dict | None, nvlink: dict | None, pcie: dict) -> dict:
    n = len(gpus)
    if n == 0:
        return intra_result("shared-memory", 0, "CPU ranks on one node reduce through shared memory", "no GPU found")
    if n == 1:
        return intra_result("none", 1, "one GPU: no link between GPUs", "one GPU found")
    return accel.detect({"gpus": gpus}).intra(gpus, topo, nvlink, pcie)


def _inter_result(kind: str, detail: str, evidence: str, rate: float | None = None, ports: int = 0,
                  interface: str | None = None, devices: list[str] | None = None) -> dict:  # fmt: skip
    return {"kind": kind, "rate_gbps": rate, "ports": ports, "interface": interface, "detail": detail,
            "evidence": evidence, "devices": devices or []}  # fmt: skip


def _inter(gpus, ib_ports, net, ifname, ib_disabled) -> dict:
    # NCCL moves data over RDMA ports where it finds them; gloo (CPU ranks) only ever uses sockets.
    up = [p for p in ib_ports if p.get("state") == "Active" and p.get("physical_state") == "LinkUp"]
    if gpus and up and not ib_disabled:
        ib = [p for p in up if (p.get("link_layer") or "InfiniBand") == "InfiniBand"]
        chosen, kind = (ib, "infiniband") if ib else (up, "roce")
        rates = Counter(p["rate_gbps"] for p in chosen if p.get("rate_gbps"))
        rate = max(rates, key=lambda r: (rates[r], r)) if rates else None
        at = [f"{p['ca']}:{p['port']}" for p in chosen if p.get("rate_gbps") == rate]
        layer = "InfiniBand" if ib else "Ethernet (RoCE)"
        detail = f"{len(at)} {layer} port(s) at {rate:g} Gb/s" if rate else f"{layer}, rate unknown"
        seen = f"RDMA ports Active/LinkUp: {', '.join(at) or 'rate not shown'}"
        return _inter_result(kind, detail, seen, rate, len(at), ifname, at)
    iface, why = _pick(net, ifname)
    if iface is None:
        return _inter_result("unknown", "no interface between nodes found", why, interface=ifname)
    name = iface["name"]
    if iface["virtual"] or iface.get("type") == ARPHRD_LOOPBACK:
        what = ("the loopback interface: this host only" if iface.get("type") == ARPHRD_LOOPBACK else
                "a bridge (containers, network namespaces)" if iface.get("bridge") else
                "a virtual interface such as a veth (containers, network namespaces)")  # fmt: skip
        nominal = f"; its nominal {iface['speed_mbps']} Mb/s is no line rate" if iface.get("speed_mbps") else ""
        seen = f"sysfs: /sys/class/net/{name} is under /sys/devices/virtual{nominal}"
        return _inter_result("virtual", f"{name}: {what}", seen, None, 1, name)
    speed = iface.get("speed_mbps")
    rate = speed / 1000 if speed else None
    over = "IPoIB" if iface.get("type") == ARPHRD_INFINIBAND else "Ethernet"
    detail = f"TCP sockets over {over} {name}" + (f" at {rate:g} Gb/s" if rate else ", speed unknown")
    seen = f"sysfs: /sys/class/net/{name} operstate {iface.get('operstate')}, speed " + (
        f"{speed} Mb/s" if speed else "not reported")
    return _inter_result("ethernet", detail, seen, rate, 1, name)


def _matches(spec: str, name: str) -> bool:
    """NCCL_SOCKET_IFNAME's syntax: prefixes, "=" for exact names, "^" to exclude."""
    exclude, spec = spec.startswith("^"), spec.lstrip("^")
    exact, spec = spec.startswith("="), spec.lstrip("=")
    hit = any((name == p) if exact else name.startswith(p) for p in spec.split(",") if p)
    return hit != exclude


def _pick(net: list[dict], ifname: str | None) -> tuple[dict | None, str]:
    """The interface the job uses: the one ifname names, else the fastest physical interface that is up."""
    if ifname:
        found = [i for i in net if _matches(ifname, i["name"])]
        if not found:
            return None, f"no interface matches {ifname!r} (sysfs lists {', '.join(i['name'] for i in net) or 'none'})"
        return max(found, key=lambda i: (i.get("operstate") == "up", i.get("speed_mbps") or 0)), ""
    real = [i for i in net if i.get("operstate") == "up" and not i["virtual"] and i.get("type") != ARPHRD_LOOPBACK]
    if real:
        return max(real, key=lambda i: i.get("speed_mbps") or 0), ""
    virtual = [i for i in net if i.get("operstate") in ("up", "unknown") and i.get("type") != ARPHRD_LOOPBACK]
    if virtual:
        return max(virtual, key=lambda i: (i.get("operstate") == "up", not i.get("bridge"))), ""
    return None, "sysfs lists no interface that is up besides loopback"
