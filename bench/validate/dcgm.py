"""validate's dcgm stage: DCGM's own diagnostic on every node at once, each on its own clock.

    bench validate --hostfile H --dcgm 2                      # level 2 on every node that has dcgmi
    bench validate --hostfile H --level full --dcgm-timeout 2400

`dcgmi diag -r N` runs for seconds (level 1), about two minutes (2) or about
fifteen (3) by NVIDIA's dcgmi reference (bench.cluster.accel.nvidia.dcgm.DOCUMENTED_S):
too long for the inventory's wait, so it is a stage of its own, after the
health check and before anything trains (it loads the GPUs itself). Every
node that passed so far and whose inventory found dcgmi runs it at once
(bench.cluster.dcgm_node), killed on the node after its timeout: twice the
level's documented length, or --dcgm-timeout. Rows per node (and per GPU DCGM
names), judged by the health table (bench/data/health_actions.json):
  PASS / WARN / FAIL   what DCGM found (dcgm-fail drains the GPU, dcgm-warn is watched);
  ERROR                "unknown: DCGM level N did not finish in T s", dcgmi failing, or the node not answering:
                       that node is unknown, the others' results stand;
  SKIP                 dcgmi not installed on the node (a row only where a level was asked for by --dcgm N).
"""

from __future__ import annotations

import time

from bench.cluster.dcgm_node import diagnose_all
from bench.cluster.accel.nvidia.dcgm import DOCUMENTED_S, timeout_for
from bench.cluster.preflight import inventory_wait_s
from bench.launch.registry import get
from bench.validate.budget import reach_timeout
from bench.validate.health import judge
from bench.validate.state import Validation


def timeout_of(v: Validation) -> float:
    """A node's dcgmi may run this long: --dcgm-timeout, else twice the level's documented length."""
    level = v.cfg.dcgm_level()
    return v.cfg.dcgm_timeout if v.cfg.dcgm_timeout is not None else timeout_for(level)


def dcgm(v: Validation) -> None:
    t0 = time.time()
    level = v.cfg.dcgm_level()
    v.skip_left_out("dcgm")
    hosts = [h for h in v.good if (v.inventory.get(h) or {}).get("dcgmi")]
    if v.cfg.dcgm != "auto":  # asked for by level: say where it could not run
        for h in v.good:
            if h not in hosts:
                v.add_node("dcgm", h, "SKIP", reason=f"dcgmi not installed (the inventory found none on the "
                           f"node's PATH): DCGM level {level} not run", t0=t0)
    if not hosts:
        return
    timeout = timeout_of(v)
    via = get(v.launcher_for(hosts)).preflight_via
    wait = reach_timeout(timeout + inventory_wait_s(via), len(hosts))
    answers, unreached = diagnose_all(via, hosts, level, timeout, wait, container_exec=v.cfg.container_exec)
    v.figures["dcgm"] = {"level": level, "timeout_s": timeout, "documented_s": DOCUMENTED_S[level],
                         "seconds": {h: a.get("seconds") for h, a in answers.items()}}
    for host in hosts:
        if host in unreached:
            v.add_node("dcgm", host, "ERROR", reason=f"unknown: its DCGM level {level} gave no answer within "
                       f"{wait:g} s ({unreached[host]})", t0=t0)
            continue
        a = answers[host]
        if a.get("timed_out"):
            v.add_node("dcgm", host, "ERROR", f"dcgmi diag -r {level}: no result in {timeout:g} s",
                       f"DCGM level {level}: about {DOCUMENTED_S[level]:g} s by NVIDIA's dcgmi reference",
                       f"unknown: DCGM level {level} did not finish in {timeout:g} s (killed on the node; "
                       f"--dcgm-timeout gives it longer)", t0=t0)
            continue
        report = a["report"]
        if report.get("read", {}).get("dcgm"):
            report["read"]["dcgm"] += f" in {a.get('seconds', 0):g} s"
        v.figures.setdefault("dcgm_reports", {})[host] = report
        judge(v, host, report, t0, check="dcgm")
