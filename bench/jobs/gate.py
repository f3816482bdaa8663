"""Before anything launches: every host answers with the same software, and the cluster can run the job.

    nodes, verdict = inspect_cluster(cfg, placement, quiet=False)

A host that does not answer or runs other versions is named (RunFailed,
exit 1); a heterogeneous set is shown in one block on stderr; --strict
refuses it, and a node that cannot run refuses always. The device follows
the nodes, not the (maybe GPU-less) node bench runs on.
"""

from __future__ import annotations

import sys

from bench.cluster.hetero import verdict as judge
from bench.cluster.inventory import probe_any, selected
from bench.cluster.preflight import HostCheck, check_or_raise, wait_s
from bench.core.config import LaunchConfig
from bench.core.errors import BadInput, RunFailed
from bench.core.precision import cpu_refusal
from bench.jobs.plan import Placement
from bench.launch.registry import get


def inspect_cluster(cfg: LaunchConfig, placement: Placement, quiet: bool, *, precision: str = "fp32",
                    micro_batch: int | None = None, run_root: str | None = None) -> tuple[list[dict], dict]:
    """Preflight every host, take each node's inventory, and judge the set (see the module docstring).

    run_root: the results root, which every host must see as the same writable directory.
    """
    kind = get(placement.launcher)
    checks = preflight(cfg, placement, run_root)
    nodes, unreachable = probe_any(kind.probe_via, placement.resources, 60.0, container_exec=cfg.container_exec)
    if unreachable:
        raise RunFailed("; ".join(f"probe: {h}: {why}" for h, why in unreachable.items()))
    # What the results root is on each host goes into its inventory (the record's), its warnings to stderr.
    by_host = {c.host: c for c in checks}
    for n in nodes:
        c = by_host.get(n.get("host"))
        if c is None:
            continue
        if c.fs is not None:
            n["shared_dir"] = c.fs
        for w in [] if quiet else c.warnings:
            print(f"bench: preflight: {c.host}: {w}", file=sys.stderr)
    return nodes, gate([selected(n) for n in nodes], precision, micro_batch, strict=cfg.strict, quiet=quiet,
                       compile=bool(getattr(cfg, "compile", False)))


def preflight(cfg: LaunchConfig, placement: Placement, run_root: str | None = None) -> list[HostCheck]:
    """Every host answers, with the same versions, and sees run_root as the directory bench writes; else RunFailed.
    Each host's answer (what the results root is there, warnings about it).

    Nothing to do for a launcher that starts only local ranks.
    """
    via = get(placement.launcher).preflight_via
    if via is None:
        return []
    return check_or_raise(list(placement.resources), timeout=wait_s(via),
                          container_exec=cfg.container_exec, run_root=run_root, via=via)


def gate(nodes: list[dict], precision: str, micro_batch: int | None, *, strict: bool = False,
         quiet: bool = False, compile: bool = False) -> dict:
    """The heterogeneity verdict of the selected GPUs, shown in one block; raises when refused."""
    v = judge(nodes, precision, micro_batch, compile=compile)
    shown = [f for f in v["findings"] if f["level"] in ("warn", "fail")]
    if (shown and not quiet) or v["level"] == "fail":
        print(f"bench: cluster verdict {v['level'].upper()} ({'uniform' if v['uniform'] else 'heterogeneous'}):",
              file=sys.stderr)
        for f in shown:
            print(f"  [{f['level']}] {f['code']}: {f['message']}", file=sys.stderr)
    if v["level"] == "fail":
        raise RunFailed("cluster verdict FAIL: a node cannot run this job (see above); nothing launched")
    if strict and (v["level"] != "ok" or not v["uniform"]):
        raise RunFailed("--strict: the cluster is not uniform (see above); nothing launched")
    return v


def check_precision(precision: str, device: str) -> None:
    why = cpu_refusal(precision) if device == "cpu" else None
    if why:
        raise BadInput(f"--precision {precision}: {why}")


def device_follows_nodes(cfg: LaunchConfig, placement: Placement) -> bool:
    """Whether the nodes' probe decides the device (a remote launcher with --device auto): this node's
    device (a GPU-less login node's cpu) says nothing about theirs, so nothing may be judged by it."""
    return get(placement.launcher).remote and cfg.device == "auto"


def device_of(cfg: LaunchConfig, placement: Placement, verdict: dict) -> str:
    """The device the ranks use: the compute nodes decide under a multi-node launcher, not this node."""
    if verdict and device_follows_nodes(cfg, placement):
        return "cuda" if verdict["gpus"] else "cpu"
    return placement.device


def accel_of(device: str, verdict: dict) -> str | None:
    """The accelerator backend a launch on the nodes names (their ranks' visible-devices variable,
    bench.launch.node --accel): the verdict's, from the nodes' inventories; None on CPU ranks or unjudged."""
    return (verdict or {}).get("accel") if device != "cpu" else None
