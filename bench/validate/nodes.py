"""validate's first checks, per node: preflight (reached, versions, the shared folder) and inventory (GPUs, links).

preflight is bench.cluster.preflight, through the launcher's own way to the
nodes (ssh, one srun step, one mpirun); inventory is bench probe on every
node at once, the same way (bench.cluster.inventory), whose process also
reads the node's health where the health check is asked for, and the
heterogeneity verdict (bench.cluster.hetero), which also decides the device
of every later job. A node not reached, or whose probe did not answer, is
an ERROR (it could not be checked); one that answered with other software
or an inventory the verdict refuses is a FAIL. Either is left out of the rest.
"""

from __future__ import annotations

import dataclasses
import time

from bench.cluster.hetero import verdict
from bench.cluster.inventory import probe_any, selected
from bench.cluster.preflight import inventory_wait_s, wait_s
from bench.cluster.preflight import preflight as check_hosts
from bench.cluster.same_machine import refuse
from bench.cluster.shared_dir import fs_text
from bench.core.errors import BadInput
from bench.core.precision import cpu_refusal
from bench.launch.registry import get
from bench.validate.budget import reach_timeout
from bench.validate.health import health_request
from bench.validate.state import CLUSTER, Validation


def preflight(v: Validation) -> None:
    t0 = time.time()
    if v.this_node_only:
        v.add_node("preflight", next(iter(v.resources)), "SKIP", reason="this node only: nothing to reach")
        return
    via = get(v.launcher).preflight_via or "ssh"
    try:
        answers = check_hosts(list(v.resources), timeout=reach_timeout(wait_s(via), len(v.resources)),
                              run_root=v.cfg.out, via=via, container_exec=v.cfg.container_exec)
    except ValueError as e:  # a host name that must not reach ssh; the hostfile parser should have said so
        raise BadInput(f"--hostfile: {e}") from None
    # One machine under two names would be measured twice, against itself: refused, both lines named.
    refuse({c.host: c.hostname for c in answers if c.ok and c.hostname}, "its hostname", v.hosts.hostfile)
    for c in answers:
        if c.ok:
            v.hostname_of[c.host] = c.hostname or c.host
            vers = c.versions
            if c.fs is not None:
                v.figures.setdefault("shared_dir", {})[c.host] = c.fs
            v.add_node("preflight", c.host, "WARN" if c.warnings else "PASS",
                       f"{c.hostname}: python {c.python}, deepspeed {vers.get('deepspeed')}, torch "
                       f"{vers.get('torch')}; --out on {fs_text(c.fs)}", f"same as this machine ({via})",
                       "; ".join(c.warnings), t0=t0)
        else:
            # Not reached, or no answer: nothing about the node is known (ERROR). Reached, with other software
            # or storage than this machine: checked, and wrong (FAIL).
            status = "ERROR" if c.unanswered else "FAIL"
            v.add_node("preflight", c.host, status, reason="; ".join(c.problems),
                       reference=f"same as this machine ({via})", t0=t0)


def _inventory_timeout(kind, nodes: int) -> float:
    return reach_timeout(inventory_wait_s(kind.preflight_via), nodes)


def _value(inv: dict) -> str:
    gpus = inv.get("gpus") or []
    cpu = inv.get("cpu") or {}
    text = (", ".join(sorted({g.get("name") or "?" for g in gpus})) + f" x{len(gpus)}" if gpus else
            f"no GPU: {cpu.get('model') or 'CPU'}, {cpu.get('logical_cores') or '?'} cores")
    link = inv.get("interconnect") or {}
    kinds = [f"{scope} {(link.get(scope) or {}).get('kind')}" for scope in ("intra", "inter") if link.get(scope)]
    return text + (f"; links: {', '.join(kinds)}" if kinds else "")


def inventory(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("inventory")
    if not v.good:
        v.add("heterogeneity", CLUSTER, "SKIP", reason="no host passed preflight")
        return
    good = {h: v.resources[h] for h in v.good}
    kind = get(v.launcher_for(list(good)))
    via = kind.probe_via
    nodes, unreachable = probe_any(via, good, _inventory_timeout(kind, len(good)), health=health_request(v),
                                   container_exec=v.cfg.container_exec)
    for host, why in unreachable.items():
        v.add_node("inventory", host, "ERROR", reason=f"not probed ({via}): {why}", t0=t0)
    verdict_ = verdict([selected(n) for n in nodes], v.cfg.precision, v.level.micro_batch)
    v.device = "cuda" if verdict_["gpus"] else "cpu"
    v.figures["verdict"] = verdict_
    failing = {h: f["message"] for f in verdict_["findings"] if f["level"] == "fail" for h in f["hosts"]}
    for n in nodes:
        host, inv = n["host"], selected(n)
        v.inventory[host] = inv
        v.hostname_of.setdefault(host, inv.get("hostname") or host)
        gpus = inv.get("gpus") or []
        v.figures.setdefault("gpu_model", {})[host] = ", ".join(sorted({g.get("name") or "?" for g in gpus})) or "cpu"
        v.add_node("inventory", host, "FAIL" if host in failing else "PASS", _value(inv), reason=failing.get(host, ""),
                   t0=t0)
    # Two names whose GPUs share a UUID are one machine (a hostname the machine reports per interface, a VM).
    refuse({n["host"]: tuple(g.get("uuid") or "" for g in n.get("gpus") or []) for n in nodes}, "a GPU UUID",
           v.hosts.hostfile)
    shown = [f"{f['level']} {f['code']}" for f in verdict_["findings"] if f["level"] in ("warn", "fail")]
    status = {"ok": "PASS", "warn": "WARN", "fail": "FAIL"}[verdict_["level"]]
    v.add("heterogeneity", CLUSTER, status, "uniform" if verdict_["uniform"] else "heterogeneous",
          reason="; ".join(shown) or "one kind of node", t0=t0)
    if v.device == "cpu" and cpu_refusal(v.cfg.precision):
        raise BadInput(f"--precision {v.cfg.precision}: the nodes have no GPU and {cpu_refusal(v.cfg.precision)}")


def reread_health(v: Validation, since: float | None) -> None:
    """Each good node's health read again (one probe launch, the inventory's way): a soak's round ends with what
    its stress raised. Kernel-log events from `since` on."""
    good = {h: v.resources[h] for h in v.good}
    if not good:
        return
    kind = get(v.launcher_for(list(good)))
    ask = health_request(v)
    if ask is None:
        return
    fresh, unreachable = probe_any(kind.probe_via, good, _inventory_timeout(kind, len(good)),
                                   health=dataclasses.replace(ask, since=since), container_exec=v.cfg.container_exec)
    for n in fresh:
        v.inventory.setdefault(n["host"], {})["health"] = n.get("health")
    for host in unreachable:
        v.inventory.setdefault(host, {})["health"] = None
