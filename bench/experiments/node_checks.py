"""The per-node checks of `bench validate`, in the order they run: preflight, inventory, throughput (bandwidth:
link_checks).

Each takes the Validation, adds its Check rows (per node, and for the
"cluster" where it has one) and leaves the hosts that FAILed out of the
later checks. Every figure comes from bench.analysis.metrics; tolerances
from bench.analysis.references.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from bench.analysis import metrics
from bench.analysis.references import judge, judge_relative
from bench.cluster.hetero import verdict
from bench.cluster.inventory import probe_hosts, selected
from bench.cluster.preflight import preflight as check_hosts
from bench.core.errors import BadInput
from bench.core.precision import cpu_refusal
from bench.experiments.validation import CLUSTER, Validation, run_one

# The share of the cluster's throughput one part may cost before it is named a straggler (metrics.straggler_cost).
STRAGGLER_WARN = 0.10

def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _rate(bps: float) -> str:
    return f"{bps / 1e6:.3g} MB/s"


def preflight(v: Validation) -> None:
    t0 = time.time()
    try:
        answers = check_hosts(list(v.resources), timeout=15.0, run_root=v.cfg.out)
    except ValueError as e:  # a host name that must not reach ssh; the hostfile parser should have said so
        raise BadInput(f"--hostfile: {e}") from None
    for c in answers:
        if c.ok:
            v.hostname_of[c.host] = c.hostname or c.host
            vers = c.versions
            v.add("preflight", c.host, "PASS", f"{c.hostname}: python {c.python}, deepspeed {vers.get('deepspeed')}, "
                  f"torch {vers.get('torch')}", "same as this machine", t0=t0)
        else:
            v.add("preflight", c.host, "FAIL", reason="; ".join(c.problems), reference="same as this machine", t0=t0)


def inventory(v: Validation) -> None:
    t0 = time.time()
    v.skip_excluded("inventory", {h: "excluded: FAIL in preflight" for h in v.resources})
    if not v.good:
        v.add("heterogeneity", CLUSTER, "SKIP", reason="no host passed preflight")
        return
    nodes, unreachable = probe_hosts({h: v.resources[h] for h in v.good}, 30.0, False)
    for host, why in unreachable.items():
        v.add("inventory", host, "FAIL", reason=f"not probed: {why}", t0=t0)
    verdict_ = verdict([selected(n) for n in nodes], v.cfg.precision, v.level.micro_batch)
    v.device = "cuda" if verdict_["gpus"] else "cpu"
    v.figures["verdict"] = verdict_
    failing = {h: f["message"] for f in verdict_["findings"] if f["level"] == "fail" for h in f["hosts"]}
    for n in nodes:
        host, inv = n["host"], selected(n)
        v.inventory[host] = inv
        gpus = inv.get("gpus") or []
        v.figures.setdefault("gpu_model", {})[host] = ", ".join(sorted({g.get("name") or "?" for g in gpus})) or "cpu"
        cpu = n.get("cpu") or {}
        value = (", ".join(sorted({g.get("name") or "?" for g in gpus})) + f" x{len(gpus)}" if gpus else
                 f"no GPU: {cpu.get('model') or 'CPU'}, {cpu.get('logical_cores') or '?'} cores")
        v.add("inventory", host, "FAIL" if host in failing else "PASS", value, reason=failing.get(host, ""), t0=t0)
    shown = [f"{f['level']} {f['code']}" for f in verdict_["findings"] if f["level"] in ("warn", "fail")]
    status = {"ok": "PASS", "warn": "WARN", "fail": "FAIL"}[verdict_["level"]]
    v.add("heterogeneity", CLUSTER, status, "uniform" if verdict_["uniform"] else "heterogeneous",
          reason="; ".join(shown) or "one kind of node", t0=t0)
    if v.device == "cpu" and cpu_refusal(v.cfg.precision):
        raise BadInput(f"--precision {v.cfg.precision}: the nodes have no GPU and {cpu_refusal(v.cfg.precision)}")


def _relative_se(steps: list[float]) -> float:
    """The standard error of a node's mean step, relative to it: how far its mean may move run to run."""
    if len(steps) < 2:
        return 0.0
    mean = sum(steps) / len(steps)
    var = sum((x - mean) ** 2 for x in steps) / (len(steps) - 1)
    return (var ** 0.5) / len(steps) ** 0.5 / mean


def solo_runs(v: Validation, hosts: list[str], tag: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every host alone (one rank, no communication), all at once; ({host: record}, {host: its figures}).

    The runs start their steps together (a barrier in the validate folder, which every host shares): nodes
    that share cores, a switch or a power budget are then measured under the load the data-parallel run puts
    on them, not during each other's start-up.
    """
    barrier = {"dir": os.path.join(v.vdir, "barriers", f"{tag}-{len(v.runs)}"), "count": len(hosts),
               "timeout_s": v.level.timeout / 2}
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        recs = dict(zip(hosts, pool.map(lambda h: run_one(v, {h: v.resources[h][:1]}, v.level.steps, barrier),
                                        hosts)))
    ok = {}
    for h, rec in recs.items():
        v.runs[f"{tag}:{h}"] = rec.get("run_dir", "")
        if rec.get("status") == "ok":
            summary = _summary(rec)
            steps = ((summary.get("ranks") or [{}])[0]).get("step_s") or []
            # The statistic the data-parallel run is judged by too (figures.images_per_s: steps summed).
            ok[h] = {"images_per_s": rec["figures"]["images_per_s"], "samples": steps, "se": _relative_se(steps),
                     "params": (summary.get("model") or {}).get("params")}
    return recs, ok


def _judge_one(v: Validation, h: str, ips: float, median: float, n_ok: int):
    """(status, reference text, reason) of one node's throughput in one round."""
    gpus = v.inventory.get(h, {}).get("gpus") or []
    ref = v.table.throughput_for(gpus[0]["name"], v.cfg.precision, v.level.model, v.level.micro_batch) \
        if gpus and gpus[0].get("name") else None
    if ref is not None:
        status, dev = judge(ips, ref.value, ref.lower, ref.upper)
        return (status, f"{ref.value:g} img/s ({ref.gpu}, {ref.precision})",
                f"{_pct(dev)} from the reference (tolerance {ref.lower}..{ref.upper}); {ref.source[:80]}")
    if n_ok < 2:
        return "PASS", "none", "no reference for this node and no other node to compare with"
    status, dev = judge_relative(ips, median, v.table.relative)
    return (status, f"cluster median {median:.1f} img/s",
            f"{_pct(dev)} from the median (WARN below {_pct(v.table.relative.warn_lower)}, FAIL below "
            f"{_pct(v.table.relative.fail_lower)}); no published reference for "
            f"{gpus[0]['name'] if gpus else 'CPU'} / {v.level.model}")


def throughput(v: Validation) -> None:
    t0 = time.time()
    v.skip_excluded("throughput", {})
    hosts = list(v.good)
    if not hosts:
        return
    repeats = v.cfg.repeats
    rounds = [solo_runs(v, hosts, "throughput" if r == 0 else f"throughput-r{r + 1}") for r in range(repeats)]
    if repeats == 1:
        solo = rounds[0][1]
        if len(solo) >= 2 and metrics.straggler_cost({h: 1 / s["images_per_s"] for h, s in solo.items()}) \
                >= STRAGGLER_WARN:
            # One slow node in one measurement is not yet a straggler: nodes that share cores or a switch can
            # be unlucky once. Measure every node again and keep each one's faster round: slow in both is slow.
            rounds.append(solo_runs(v, hosts, "throughput-repeat"))
            v.figures["node_rounds"] = 2
        else:
            v.figures["node_rounds"] = 1
    else:
        v.figures["node_rounds"] = repeats
    # Each node's figure: its median round (with 2, the faster): one bad round does not make a node slow.
    per_host = {h: sorted((r[1][h] for r in rounds if h in r[1]), key=lambda s: s["images_per_s"]) for h in hosts}
    solo = {h: xs[len(xs) // 2] for h, xs in per_host.items() if xs}
    ok = {h: s["images_per_s"] for h, s in solo.items()}
    for h, s in solo.items():
        v.figures["node_step_s"][h] = v.level.micro_batch / ok[h]
        v.figures["node_images_per_s"][h] = ok[h]
        v.figures.setdefault("node_step_samples", {})[h] = s["samples"]
        v.figures.setdefault("node_step_se", {})[h] = s["se"]
        v.figures.setdefault("params", s["params"])
    if len(rounds) > 1:
        v.figures["node_images_per_s_rounds"] = {h: [r[1][h]["images_per_s"] if h in r[1] else None for r in rounds]
                                                 for h in hosts}
    for h in hosts:
        if h not in ok:
            err = (rounds[-1][0].get(h) or {}).get("error") or {}
            v.add("throughput", h, "FAIL", reason=f"single-rank run failed at {err.get('where')}: {err.get('reason')}",
                  t0=t0)
            continue
        # Judged in every round against that round's median; the figure shown is the node's median round.
        verdicts = []
        for r in rounds:
            if h in r[1]:
                median_r = metrics.percentile([s["images_per_s"] for s in r[1].values()], 50)
                verdicts.append(_judge_one(v, h, r[1][h]["images_per_s"], median_r, len(r[1]))[0])
            else:
                verdicts.append("FAIL")  # its run failed in this round
        median = metrics.percentile(list(ok.values()), 50)
        status, reference, reason = _judge_one(v, h, ok[h], median, len(ok))
        value = f"{ok[h]:.1f} img/s" + (" (faster of 2 rounds)" if v.figures["node_rounds"] == 2 and repeats == 1
                                        else "")
        if repeats > 1:
            failed = sum(s != "PASS" for s in verdicts)
            status = "FAIL" if all(s == "FAIL" for s in verdicts) else "WARN" if failed else "PASS"
            value = f"{ok[h]:.1f} img/s (median of {repeats})"
            reason = f"not PASS in {failed} of {repeats} rounds ({', '.join(verdicts)}); median round: {reason}"
        v.add("throughput", h, status, value, reference, reason, t0=t0)


def _summary(rec: dict) -> dict:
    try:
        with open(os.path.join(rec["run_dir"], "summary.json")) as f:
            return json.load(f)
    except (OSError, KeyError, ValueError):
        return {}
