"""How a node's GPUs reach each other and the node reaches the others, from what the node shows.

    from bench.cluster.interconnect import collect, parse_ibstat
    collect(inv["gpus"], os.environ)            # {"raw", "intra", "inter", "errors"}: inv["interconnect"]
    parse_ibstat(open("ibstat.txt").read())     # [{"ca", "port", "state", "rate_gbps", ...}]

What collect reads, each cheap and none needing root: the GPUs' own links as
their vendor's backend reads them (bench.cluster.accel: Accelerator.links,
only when the node has GPUs; raw "topo" and "nvlink"), `ibstat` (only where it
is installed), and sysfs: /sys/class/infiniband/*/ports/*/{rate,state,
phys_state,link_layer} and /sys/class/infiniband/*/device/net/ (each HCA's
interfaces), /sys/class/net/*/{speed,operstate,type} (an interface whose
device lies under /sys/devices/virtual is virtual: lo, veth, bridge),
and each GPU's PCIe link (/sys/bus/pci/devices/BUS/max_link_{speed,width}
and its upstream port's). A tool that is missing or fails is a reason in
"errors", never an exception. The parsers are pure, tested on recorded real
outputs (tests/fixtures/gpu, tests/fixtures/net); bench.cluster.linkkind
turns their results into a kind of link (classify, re-exported here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from bench.cluster import accel
from bench.cluster.linkkind import classify
from bench.core import pcie

__all__ = ["classify", "collect", "parse_ibstat", "read_ib_dir",
           "read_ib_netdevs", "read_sysfs_ib", "read_sysfs_net", "read_sysfs_pci"]  # fmt: skip

# A probe must stay fast: a healthy driver answers topo/nvlink in 1-3 s, ibstat in well under one.
TOOL_TIMEOUT_S = 10.0
_IB_STATE = {"1": "Down", "2": "Initializing", "3": "Armed", "4": "Active", "5": "ActDefer"}


def _port(ca: str, port: int, ca_type: str | None = None) -> dict:
    return {"ca": ca, "port": port, "state": None, "physical_state": None, "rate_gbps": None, "link_layer": None,
            "ca_type": ca_type}


def parse_ibstat(text: str) -> list[dict]:
    """`ibstat` -> one {"ca", "port", "state", "physical_state", "rate_gbps", "link_layer", "ca_type"} per port (the
    CA type, "MT4129" for a ConnectX-7: ports of one kind are each other's peers)."""
    ports: list[dict] = []
    ca = ca_type = None
    keys = {"State": "state", "Physical state": "physical_state", "Rate": "rate_gbps", "Link layer": "link_layer"}
    for line in text.splitlines():
        m = re.match(r"^CA '([^']+)'", line)
        if m:
            ca, ca_type = m.group(1), None
            continue
        key, _, value = (s.strip() for s in line.partition(":"))
        if key == "CA type" and ca is not None:
            ca_type = value or None
            continue
        m = re.match(r"^Port (\d+)$", key)
        if m and ca is not None and not value:
            ports.append(_port(ca, int(m.group(1)), ca_type))
        elif ports and ports[-1]["ca"] == ca and key in keys:
            ports[-1][keys[key]] = _number(value) if key == "Rate" else value
    return ports


def _number(text: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)", text or "")
    return float(m.group(1)) if m else None


def _ls(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:  # absent, or a driver that refuses the read (speed of a down link: EINVAL)
        return None


def read_sysfs_ib(root: str = "/sys") -> list[dict]:
    """The RDMA ports under ROOT/class/infiniband, in parse_ibstat's shape (sysfs "4: ACTIVE" -> "Active")."""
    return read_ib_dir(os.path.join(root, "class", "infiniband"))


def read_ib_dir(base: str) -> list[dict]:
    """read_sysfs_ib of a folder laid out as /sys/class/infiniband (the live one, or a copy of it)."""
    ports = []
    for ca in _ls(base):
        pdir = os.path.join(base, ca, "ports")
        ca_type = _read(os.path.join(base, ca, "hca_type"))  # the CA's kind, as ibstat's "CA type" says it
        for p in sorted(_ls(pdir), key=lambda s: (len(s), s)):
            d = os.path.join(pdir, p)
            rec = _port(ca, int(p) if p.isdigit() else p, ca_type)
            state, phys = _read(os.path.join(d, "state")) or "", _read(os.path.join(d, "phys_state")) or ""
            rec["state"] = _IB_STATE.get(state.partition(":")[0].strip(), state or None)
            rec["physical_state"] = phys.partition(":")[2].strip() or phys or None
            rec["rate_gbps"] = _number(_read(os.path.join(d, "rate")))
            rec["link_layer"] = _read(os.path.join(d, "link_layer"))
            ports.append(rec)
    return ports


def read_ib_netdevs(root: str = "/sys") -> dict[str, list[str]]:
    """Each RDMA device's network interfaces, {"mlx5_0": ["ibp12s0"]}: ROOT/class/infiniband/<hca>/device/net/ (the
    PCI function's netdevs: IPoIB on InfiniBand, the Ethernet port on RoCE); [] where it has none."""
    base = os.path.join(root, "class", "infiniband")
    return {ca: sorted(_ls(os.path.join(base, ca, "device", "net"))) for ca in _ls(base)}


def read_sysfs_net(root: str = "/sys") -> list[dict]:
    """Every interface under ROOT/class/net: speed (Mb/s; -1 or unreadable -> None), operstate, virtual."""
    base = os.path.join(root, "class", "net")
    virtual_dir = os.path.join(os.path.realpath(root), "devices", "virtual") + os.sep
    out = []
    for name in _ls(base):
        d = os.path.join(base, name)
        speed = _read(os.path.join(d, "speed"))
        kind = _read(os.path.join(d, "type"))
        out.append({
            "name": name,
            "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
            "operstate": _read(os.path.join(d, "operstate")),
            "virtual": os.path.realpath(d).startswith(virtual_dir),
            "bridge": os.path.isdir(os.path.join(d, "bridge")),
            "type": int(kind) if kind and kind.isdigit() else None,   # 1 ether, 32 IPoIB, 772 loopback
        })  # fmt: skip
    return out


def read_sysfs_pci(bus_ids: list[str], root: str = "/sys") -> dict[str, dict]:
    """Each GPU's PCIe link, {bus id: {"speed_gts", "width", "gen", "gen_now", "width_now"}}: the least over the
    device and every PCI device above it (bench.core.pcie: a Gen4 card in a Gen3 slot runs at Gen3, as NCCL reads
    it; a switch's narrower uplink too)."""
    out = {}
    for bus in bus_ids:
        got = pcie.link(bus, root)
        if got["speed_gts"] is None or got["width"] is None:
            continue
        out[bus] = {k: got[k] for k in ("speed_gts", "width", "gen", "gen_now", "width_now")}
    return out


def _run(argv: list[str]) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why): the tool's one line of failure, never an exception."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None, f"{argv[0]} not installed"
    try:
        p = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, f"no answer within {TOOL_TIMEOUT_S:g}s"
    except OSError as e:
        return None, str(e.strerror or e)
    if p.returncode != 0:
        return None, f"exited {p.returncode}: {((p.stderr or p.stdout).strip().splitlines() or ['no output'])[0]}"
    return p.stdout, None


def collect(gpus: list[dict], environ, root: str = "/sys") -> dict:
    """This node's interconnect: {"raw": what each source gave, "intra", "inter", "errors": {source: why}}."""
    raw: dict = {}
    errors: dict[str, str] = {}
    topo = nvlink = None
    if gpus:  # the GPUs' own links, as their vendor's backend reads them
        links = accel.detect({"gpus": gpus}).links(TOOL_TIMEOUT_S)
        topo, nvlink = links.matrix, links.per_device
        errors.update(links.errors)
        # JSON keys are strings: raw holds {"0": links} where the backend gives {0: links}.
        raw.update(topo=topo, nvlink={str(k): v for k, v in nvlink.items()} if nvlink is not None else None)
    sysfs_ib = read_sysfs_ib(root)
    out, why = None, None
    if shutil.which("ibstat"):
        out, why = _run(["ibstat"])
    elif not sysfs_ib:  # say why nothing was seen; with sysfs ports a missing ibstat loses nothing
        why = f"ibstat not installed and no {os.path.join(root, 'class', 'infiniband')}"
    ibstat = parse_ibstat(out) if out is not None else None
    if why:
        errors["ibstat"] = why
    pcie = read_sysfs_pci([g.get("pci_bus_id") for g in gpus], root)
    net = read_sysfs_net(root)
    raw.update(ibstat=ibstat, sysfs_ib=sysfs_ib, net=net, pcie=pcie, ib_netdevs=read_ib_netdevs(root))
    # NCCL bootstraps on NCCL_SOCKET_IFNAME and moves data over RDMA where it finds it; gloo (CPU ranks) uses
    # GLOO_SOCKET_IFNAME for everything.
    names = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if gpus else ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
    ifname = next((environ[n] for n in names if environ.get(n)), None)
    kinds = classify(gpus, topo, nvlink, sysfs_ib or ibstat or [], net, ifname, pcie=pcie,
                     ib_disabled=environ.get("NCCL_IB_DISABLE") == "1")  # fmt: skip
    return {"raw": raw, **kinds, "errors": errors}
