"""InfiniBand/RoCE port health: ports down or slow among their peers, error counters, GPUDirect RDMA's module.

    from bench.cluster.health.infiniband import read_dir, port_findings, counter_findings, gpudirect_findings
    ports = read_dir("/sys/class/infiniband")        # interconnect's port records plus "counters": {name: n}
    port_findings(ports) + counter_findings(ports)
    gpudirect_findings(ports, has_gpus=True, root="/sys")    # nvidia_peermem / nv_peer_mem loaded?

Ports come from `ibstat` (bench.cluster.interconnect.parse_ibstat) or a
/sys/class/infiniband tree (interconnect.read_ib_dir), plus each port's
counters/ files. Judged per link layer (InfiniBand apart from Ethernet/RoCE):
a port not Active while another port of its layer is Active, or while no port
of the node is, is down (ib-port-no-sm when its physical link is up: the
subnet manager has not configured it); an Active port below the fastest
Active rate of its layer and CA type is slow (a card of another kind is no peer). A port whose link layer is not given is
compared with no one. Error counters that are not zero are ib-errors; a
counter at the top of its width (IBA PortCounters: 8-bit link_downed, 16-bit
port_xmit_discards, 4-bit excessive_buffer_overrun_errors, ...) has saturated
and says so. port_xmit_wait counts congestion, not errors, and is not judged.
"""

from __future__ import annotations

import os
import re

from bench.cluster.findings import finding
from bench.cluster.interconnect import read_ib_dir

SOURCE = "infiniband"
# Error counters of /sys/class/infiniband/<ca>/ports/<n>/counters and their widths in bits (IBA PortCounters).
ERROR_COUNTERS = {"symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
                  "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16,
                  "port_xmit_discards": 16, "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8,
                  "local_link_integrity_errors": 4, "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16}  # fmt: skip
# ibqueryerrors' names for the same counters.
_IBQ_NAMES = {"SymbolErrorCounter": "symbol_error", "LinkErrorRecoveryCounter": "link_error_recovery",
              "LinkDownedCounter": "link_downed", "PortRcvErrors": "port_rcv_errors",
              "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
              "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors", "PortXmitDiscards": "port_xmit_discards",
              "PortXmitConstraintErrors": "port_xmit_constraint_errors",
              "PortRcvConstraintErrors": "port_rcv_constraint_errors",
              "LocalLinkIntegrityErrors": "local_link_integrity_errors",
              "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors", "VL15Dropped": "VL15_dropped"}  # fmt: skip
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def read_counters(port_dir: str) -> dict[str, int]:
    """The port's counters/ files that hold a number (an unreadable one is left out)."""
    out = {}
    d = os.path.join(port_dir, "counters")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else ():
        try:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            out[name] = int(text)
    return out


def read_dir(base: str) -> list[dict]:
    """Every port under a /sys/class/infiniband-shaped folder, with its counters."""
    ports = read_ib_dir(base)
    for p in ports:
        p["counters"] = read_counters(os.path.join(base, p["ca"], "ports", str(p["port"])))
    return ports


def _name(p: dict) -> str:
    return f"{p['ca']}/{p['port']}"


def port_findings(ports: list[dict], source: str = SOURCE) -> list[dict]:
    out: list[dict] = []
    any_active = any(p.get("state") == "Active" for p in ports)
    for p in ports:
        layer = p.get("link_layer")
        if p.get("state") in (None, "Active") or layer is None:
            continue
        peers_active = [q for q in ports if q is not p and q.get("link_layer") == layer and q.get("state") == "Active"]
        if not peers_active and any_active:
            continue  # the only port(s) of its layer, beside a working one of another layer: not judged
        said = f"{_name(p)} ({layer}) state {p['state']}, physical state {p.get('physical_state')}"
        said += f"; {len(peers_active)} other {layer} port(s) Active" if peers_active else "; no port of the node is Active"
        code = "ib-port-no-sm" if p.get("physical_state") == "LinkUp" else "ib-port-down"
        out.append(finding(code, source, said, port=_name(p)))
    # A port's peers for its rate: the Active ports of its link layer and CA type. A node's 100 Gb/s ConnectX-6 Dx
    # frontend ports beside its 400 Gb/s ConnectX-7 rails are other cards, not slow ones.
    kinds: dict[tuple, list[dict]] = {}
    for p in ports:
        if p.get("link_layer") is not None and p.get("state") == "Active" and p.get("rate_gbps"):
            kinds.setdefault((p["link_layer"], p.get("ca_type")), []).append(p)
    for (layer, ca_type), active in kinds.items():
        top = max(p["rate_gbps"] for p in active)
        kind = f"{layer}, {ca_type}" if ca_type else layer
        for p in active:
            if p["rate_gbps"] < top:
                out.append(finding("ib-port-slow", source, f"{_name(p)} ({kind}) at {p['rate_gbps']:g} Gb/s while other "
                                   f"Active {kind} ports run at {top:g} Gb/s", port=_name(p)))  # fmt: skip
    return out


def counter_findings(ports: list[dict], source: str = SOURCE) -> list[dict]:
    out = []
    for p in ports:
        bad = {k: v for k, v in (p.get("counters") or {}).items() if k in ERROR_COUNTERS and v}
        if not bad:
            continue
        said = ", ".join(f"{k} {v}" + (" (saturated)" if v >= (1 << ERROR_COUNTERS[k]) - 1 else "") for k, v in bad.items())
        out.append(finding("ib-errors", source, f"{p.get('port_name') or _name(p)}: {said}",
                           port=p.get("port_name") or _name(p)))  # fmt: skip
    return out


def parse_ibqueryerrors(text: str) -> list[dict]:
    """`ibqueryerrors` lines ("GUID 0x... port N: [LinkDownedCounter == 25] ...") as counter records."""
    out = []
    for line in text.splitlines():
        m = re.search(r"GUID (0x[0-9a-fA-F]+) port (\w+):(.*)$", line)
        if not m:
            continue
        counters = {_IBQ_NAMES[k]: int(v) for k, v in re.findall(r"\[(\w+) == (\d+)", m.group(3)) if k in _IBQ_NAMES}
        out.append({"ca": m.group(1), "port": m.group(2), "port_name": f"GUID {m.group(1)} port {m.group(2)}",
                    "counters": counters})  # fmt: skip
    return out


def peermem_loaded(root: str = "/sys") -> str | None:
    """The GPUDirect RDMA module loaded (nvidia_peermem, or the older nv_peer_mem), None if neither."""
    return next((m for m in PEERMEM_MODULES if os.path.isdir(os.path.join(root, "module", m))), None)


def gpudirect_findings(ports: list[dict], has_gpus: bool, root: str = "/sys", source: str = SOURCE) -> list[dict]:
    """gpudirect-rdma-missing where the node has GPUs and an Active RDMA port but no peer-memory module."""
    active = [p for p in ports if p.get("state") == "Active"]
    if not has_gpus or not active or peermem_loaded(root):
        return []
    return [finding("gpudirect-rdma-missing", source, f"{len(active)} Active RDMA port(s) and GPUs, but no "
                    f"{' or '.join(PEERMEM_MODULES)} under {os.path.join(root, 'module')}")]  # fmt: skip
