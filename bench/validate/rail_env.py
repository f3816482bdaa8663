"""How one rail is measured alone: the ranks' environment that confines NCCL (or gloo) to it, per kind of rail.

    plan = rail_plan(v, "mlx5_0", hosts)     # RailPlan: the variables, the hosts it reaches, and what NCCL must show
    plan.environ, plan.how, plan.expect       # {"NCCL_IB_HCA": "=mlx5_0", ...}, "NCCL_IB_HCA==mlx5_0 ...", ("IB", "mlx5_0")

On GPUs (NCCL, whose environment is read by every rank alike):
  an HCA          NCCL_IB_HCA==<hca> (exact: mlx5_1 would also match mlx5_10), NCCL_IB_DISABLE=0 and NCCL_NET=IB,
                  so that an inherited NCCL_IB_DISABLE=1 or NCCL_NET=Socket cannot cancel it unseen;
  an interface    NCCL_NET=Socket and NCCL_IB_DISABLE=1 (else NCCL still sends over every HCA, whatever
                  NCCL_SOCKET_IFNAME says: that names its bootstrap and socket transport only), NCCL_SOCKET_IFNAME==<if>.
Both run with NCCL_DEBUG=INFO (subsystems INIT,NET) into the ranks' own logs, from which bench.launch.nccl_net reads
which transport and devices NCCL took (`expect`). On CPU (gloo, which speaks TCP only): an interface is
GLOO_SOCKET_IFNAME itself; an HCA is its network interface (/sys/class/infiniband/<hca>/device/net/, from the
inventory: IPoIB on InfiniBand, the port's Ethernet interface on RoCE), the same name on every node, else the rail
cannot be measured and says why. A node whose inventory lacks the rail altogether is named (`missing`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from bench.validate.state import Validation

# NCCL's INFO lines that say which transport and devices it took: INIT (NET/IB : Using, channels), NET.
NCCL_LOG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass
class RailPlan:
    rail: str
    hosts: list[str]                        # the nodes that have it
    environ: dict[str, str] = field(default_factory=dict)   # the launch's whole environment
    how: str = ""                           # the row's words for it: "GLOO_SOCKET_IFNAME=ib0 (mlx5_0's interface)"
    expect: tuple[str, str] | None = None   # (NCCL transport family, device) its log must show; None on CPU
    skip: str | None = None                 # why it cannot be measured at all
    missing: dict[str, str] = field(default_factory=dict)  # host -> why the rail is not there


def _raw(v: Validation, host: str) -> dict:
    return (v.interconnect(host) or {}).get("raw") or {}


def hcas(v: Validation, host: str) -> set[str]:
    """The node's RDMA devices, from its inventory: its ports (sysfs, else ibstat) and its HCAs' interfaces."""
    raw = _raw(v, host)
    ports = raw.get("sysfs_ib") or raw.get("ibstat") or []
    return {p["ca"] for p in ports if isinstance(p, dict) and p.get("ca")} | set(raw.get("ib_netdevs") or {})


def interfaces(v: Validation, host: str) -> set[str]:
    return {n["name"] for n in _raw(v, host).get("net") or [] if isinstance(n, dict) and n.get("name")}


def _environ(set_: dict[str, str], drop: tuple[str, ...] = ()) -> dict[str, str]:
    env = {k: x for k, x in os.environ.items() if k not in drop}
    env.update(set_)
    return env


def rail_plan(v: Validation, rail: str, hosts: list[str]) -> RailPlan:
    is_hca = {h: rail in hcas(v, h) for h in hosts}
    is_if = {h: rail in interfaces(v, h) for h in hosts}
    hca = any(is_hca.values())
    plan = RailPlan(rail, [h for h in hosts if (is_hca if hca else is_if)[h]])
    plan.missing = {h: f"{rail} is not among its {'HCAs' if hca else 'interfaces'} (its inventory: "
                       f"{', '.join(sorted(hcas(v, h) if hca else interfaces(v, h))) or 'none'})"
                    for h in hosts if h not in plan.hosts}
    if v.device == "cuda":
        if hca:
            plan.environ = _environ({"NCCL_IB_HCA": f"={rail}", "NCCL_IB_DISABLE": "0", "NCCL_NET": "IB",
                                     **NCCL_LOG}, drop=("NCCL_DEBUG_FILE",))
            plan.how, plan.expect = f"NCCL_IB_HCA=={rail}, NCCL_NET=IB, NCCL_IB_DISABLE=0", ("IB", rail)
        else:
            plan.environ = _environ({"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": f"={rail}",
                                     **NCCL_LOG}, drop=("NCCL_DEBUG_FILE", "NCCL_IB_HCA"))
            plan.how = (f"NCCL_NET=Socket, NCCL_SOCKET_IFNAME=={rail}: NCCL's socket transport forced, its HCAs "
                        "unused")
            plan.expect = ("Socket", rail)
        return plan
    if not hca:
        plan.environ, plan.how = _environ({"GLOO_SOCKET_IFNAME": rail}), f"GLOO_SOCKET_IFNAME={rail}"
        return plan
    # gloo speaks TCP: an HCA is measured through its interface, which one launch must name alike on every node.
    netdevs = {h: (_raw(v, h).get("ib_netdevs") or {}).get(rail) or [] for h in plan.hosts}
    none = [h for h, n in netdevs.items() if not n]
    several = {h: n for h, n in netdevs.items() if len(n) > 1}
    names = {n[0] for n in netdevs.values() if len(n) == 1}
    if none:
        plan.skip = (f"{rail} has no network interface on {', '.join(none)} (/sys/class/infiniband/{rail}/device/"
                     "net/ is empty): gloo speaks TCP and can only be told an interface")
    elif several:
        h, n = next(iter(several.items()))
        plan.skip = f"{rail} has {len(n)} interfaces on {h} ({', '.join(n)}): name the one to measure in --rails"
    elif len(names) > 1:
        plan.skip = (f"{rail}'s interface differs between nodes ({', '.join(sorted(names))}): one launch sets one "
                     "GLOO_SOCKET_IFNAME; name the interfaces in --rails")
    else:
        (ifname,) = names
        plan.environ = _environ({"GLOO_SOCKET_IFNAME": ifname})
        plan.how = f"GLOO_SOCKET_IFNAME={ifname}, {rail}'s interface"
    return plan
