"""The kind of link between a node's GPUs (intra) and from the node to the others (inter).

    from bench.cluster.linkkind import classify
    kinds = classify(gpus, topo, nvlink, ib_ports, net_ifaces, ifname="eth0")
    kinds["intra"]["kind"], kinds["inter"]["kind"]          # 'nvswitch', 'infiniband'

Inputs are the parsers' results (bench.cluster.interconnect), so recorded outputs give the same
answer as a live node. intra kinds: nvswitch (every GPU pair NVLinked with more links than a GPU
has: through switches), nvlink (direct NVLink: a full or partial mesh, a bridge), pcie (no NVLink
between the GPUs), shared-memory (no GPU: CPU ranks on one node), none (one GPU: nothing to reduce
across), unknown (the matrix could not be read). inter kinds: infiniband and roce (RDMA ports
Active and LinkUp: NCCL uses them before any socket), ethernet (a physical interface: TCP
sockets), virtual (lo, veth, bridge: devices under /sys/devices/virtual, whose nominal speed,
10000 Mb/s for a veth, is no line rate), unknown.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import combinations

# Compute capability major -> NVLink generation (Pascal P100 1, Volta 2, Ampere 3, Hopper 4, Blackwell 5).
NVLINK_GENERATION = {6: "NVLink1", 7: "NVLink2", 8: "NVLink3", 9: "NVLink4", 10: "NVLink5"}
# The most NVLinks one GPU has (H100, H200, B200: 18). A pair bonded by k links on n GPUs needs
# k*(n-1) links per GPU without a switch; more than the GPU has means the links go through NVSwitches.
MAX_NVLINKS = 18
# PCIe path types of the matrix's legend, nearest first.
PCIE_PATHS = {"PIX": "at most one PCIe bridge", "PXB": "several PCIe bridges", "PHB": "through a PCIe host bridge",
              "NODE": "between host bridges of one NUMA node", "SYS": "across the CPUs' interconnect"}  # fmt: skip
ARPHRD_INFINIBAND, ARPHRD_LOOPBACK = 32, 772


def classify(gpus: list[dict], topo: dict | None, nvlink: dict | None, ib_ports: list[dict], net_ifaces: list[dict],
             ifname: str | None = None, *, pcie: dict | None = None, ib_disabled: bool = False) -> dict:  # fmt: skip
    """{"intra": {...}, "inter": {...}}; ifname is NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME when the job sets one."""
    return {"intra": _intra(gpus, topo, nvlink, pcie or {}),
            "inter": _inter(gpus, ib_ports, net_ifaces, ifname, ib_disabled)}


def _intra_result(kind: str, n: int, detail: str, evidence: str, **extra) -> dict:
    out = {"kind": kind, "gpus": n, "detail": detail, "generation": None, "evidence": evidence,
           "links_per_gpu": None, "link_gbps": None, "nv_pair_links": None, "all_pairs": False,
           "pcie": None}  # fmt: skip
    out.update(extra)
    return out


def _slowest_pcie(gpus: list[dict], pcie: dict) -> dict | None:
    links = [pcie[g["pci_bus_id"]] for g in gpus if g.get("pci_bus_id") in pcie]
    if len(links) != len(gpus) or not links:
        return None
    return min(links, key=lambda p: (p["speed_gts"] * p["width"], p["width"]))


def _intra(gpus: list[dict], topo: dict | None, nvlink: dict | None, pcie: dict) -> dict:
    n = len(gpus)
    if n == 0:
        return _intra_result("shared-memory", 0, "CPU ranks on one node reduce through shared memory", "no GPU found")
    if n == 1:
        return _intra_result("none", 1, "one GPU: no link between GPUs", "one GPU found")
    names = [f"GPU{g['index']}" for g in gpus]
    links = (topo or {}).get("links") or {}
    if any(b not in links.get(a, {}) for a, b in combinations(names, 2)):
        why = (topo or {}).get("error") or ("nvidia-smi topo -m gave no matrix" if topo is None else
                                            "nvidia-smi topo -m lacks some of the GPUs")  # fmt: skip
        return _intra_result("unknown", n, "the GPU matrix could not be read", why)
    cells = {(a, b): links[a][b] for a, b in combinations(names, 2)}
    nv = [int(c[2:]) for c in cells.values() if re.fullmatch(r"NV\d+", c)]
    slow = _slowest_pcie(gpus, pcie)
    gen_pcie = f"PCIe Gen{slow['gen']} x{slow['width']}" if slow and slow["gen"] else None
    if not nv:
        worst = max(cells.values(), key=lambda c: list(PCIE_PATHS).index(c) if c in PCIE_PATHS else -1)
        return _intra_result("pcie", n, f"{n} GPUs over PCIe, the farthest pair {worst} ({PCIE_PATHS.get(worst, '?')})",
                             f"nvidia-smi topo -m: no NV# between GPUs; pairs {sorted(set(cells.values()))}"
                             + (f"; sysfs: slowest GPU link {gen_pcie}" if gen_pcie else ""),
                             generation=gen_pcie, pcie=slow)  # fmt: skip
    ccs = [int(g["cc"].split(".")[0]) for g in gpus if g.get("cc")]
    generation = NVLINK_GENERATION.get(min(ccs)) if len(ccs) == n else None
    nvlink = nvlink or {}   # parse_nvlink_status's int keys, or a record's raw string keys
    active = [[ln["gbps"] for ln in nvlink.get(g["index"], nvlink.get(str(g["index"]), [])) if ln["gbps"]]
              for g in gpus]
    per_gpu = min(len(a) for a in active) if nvlink and all(active) else None
    rate = min(min(a) for a in active) if per_gpu else None
    extra = {"generation": generation, "links_per_gpu": per_gpu, "link_gbps": rate, "pcie": slow,
             "nv_pair_links": min(nv), "all_pairs": len(nv) == len(cells)}
    seen = f"; nvidia-smi nvlink -s: {per_gpu} active links per GPU at {rate:g} GB/s" if per_gpu else ""
    if len(nv) < len(cells):
        return _intra_result("nvlink", n, f"{len(nv)} of {len(cells)} GPU pairs NVLinked, the others over PCIe",
                             f"nvidia-smi topo -m: {Counter(cells.values()).most_common()}{seen}", **extra)  # fmt: skip
    k = extra["nv_pair_links"]
    budget = per_gpu or MAX_NVLINKS
    # Peers on the whole node (the matrix), not only the GPUs given: 2 of 8 GPUs on NVSwitch are still switched.
    peers = sum(1 for d in (topo or {}).get("devices", []) if d.startswith("GPU")) - 1
    if k * peers > budget:
        has = f"the {budget} a GPU has" if per_gpu else f"the {budget} any GPU has"
        why = f"{k} links to each of {peers} peers is more than {has}"
        return _intra_result("nvswitch", n, f"{n} GPUs, every pair NV{k} through NVSwitch ({why})",
                             f"nvidia-smi topo -m: every GPU pair NV{k}{seen}", **extra)  # fmt: skip
    return _intra_result("nvlink", n, f"{n} GPUs, every pair NV{k} directly (a full mesh)",
                         f"nvidia-smi topo -m: every GPU pair NV{k}{seen}", **extra)  # fmt: skip


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
