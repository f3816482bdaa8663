"""validate's burn check: every GPU of a node trains at once for --burn DURATION, its throughput and clocks watched.

The per-GPU launch trains on after its timed steps (bench.worker.burn),
every rank at once behind a barrier, for the burn's seconds; each rank
keeps its throughput per second, and its node's local rank 0 samples every
GPU of the node through its backend's sampler each second (clocks, temperature, power and
its limit, the clocks event reasons, Xids and ECC raised meanwhile). Here
the two are joined per GPU by bus id and time (samples) and judged by
bench.analysis.burn against the GPU's first window (a minute, or a third
of a shorter burn) and the node's other GPUs. A GPU whose uncorrectable ECC
count rose during the burn FAILs; Xids the sampler delivered are named in its
node's row (the health check's kernel log judges them). On a CPU node there
is no sampler: the rows say so, and the throughput over time is judged alone, WARN
at most (without clocks, a rank that fell behind its node may be the scheduler's).
Each GPU is read on its own (bench.cluster.accel.nvidia.sampler): a GPU the library could not
open FAILs (gpu-unreachable, its finding in its row), one a call failed on WARNs
with the function and the library's words, and the others are judged as sampled; a
sampler thread that died, or a binding that lacks a function, makes the node's
row WARN with what happened (the tool's failure, kept apart from the node's
health). Everything sampled lands in the record (measured.burn), for a plot
per node.
"""

from __future__ import annotations

import time


from bench.analysis import burn as judge_burn
from bench.cluster.findings import bus_key, entry, xid_code
from bench.core.accel_names import GPU_SAMPLER, GPU_SAMPLER_ABSENT
from bench.validate import runs
from bench.validate.state import RANK, Validation

NO_SAMPLER = GPU_SAMPLER_ABSENT   # "no ... here": the GPU backend's sampler absent (bench/data/accelerators.json)


def window_of(seconds: float) -> float:
    """The first and last windows compared: a minute, or a third of a burn shorter than three."""
    return min(judge_burn.WINDOW_S, seconds / 3)


def samples(intervals: list[list[float]], nvml: dict[str, list] | None, t0: float,
            every: float = 1.0) -> list[judge_burn.Sample]:
    """One GPU's samples: each throughput interval [t, images/s] with the sampler's reading nearest it in time (within
    an interval; none: throughput alone), t made relative to t0. Pure (tests)."""
    cols = nvml or {}
    ts = cols.get("t") or []
    out = []
    for t, ips in intervals:
        k = min(range(len(ts)), key=lambda i: abs(ts[i] - t), default=None)
        if k is not None and abs(ts[k] - t) <= every:
            def col(name):
                return (cols.get(name) or [None] * len(ts))[k]
            reasons = col("reasons")   # None: the sampler did not give it (NotSupported): unknown, not 0
            out.append(judge_burn.Sample(t - t0, col("sm_mhz"), col("mem_mhz"), col("temp_c"), col("power_w"),
                                         col("power_limit_w"), None if reasons is None else int(reasons), ips))
        else:
            out.append(judge_burn.Sample(t - t0, throughput=ips))
    return out


def _node(v: Validation, host: str, slots: list[int], mine: dict[int, dict], seconds: float, t0: float) -> None:
    """One node's rows: a row per GPU judged against its first window and its peers, and the node's row."""
    ok = {s: e for s, e in mine.items() if e.get("status") == "ok"}
    sampler = next((e for e in ok.values() if e.get("local_rank") == 0), None) or {}
    nvml, why_not = sampler.get("nvml"), sampler.get("nvml_error") or (None if sampler else "no local rank 0 report")
    start = min((e.get("start") or 0.0 for e in ok.values()), default=0.0)
    cols = {bus_key(b): c for b, c in (nvml or {}).items()}
    series = {s: samples(e.get("intervals") or [], cols.get(bus_key(e.get("bus_id"))), start,
                         e.get("interval_s") or 1.0) for s, e in ok.items()}
    ecc = {bus_key(b): (x.get("end") or 0) - (x.get("start") or 0) for b, x in (sampler.get("ecc") or {}).items()
           if x.get("end") is not None and x.get("start") is not None}
    found = {bus_key(g) or g: list(fs) for g, fs in (sampler.get("nvml_findings") or {}).items()}
    lost = {bus_key(g) or g for g in sampler.get("nvml_lost") or []}
    unsupported = {bus_key(g) or g: rs for g, rs in (sampler.get("nvml_unsupported") or {}).items()}
    v.figures.setdefault("burn", {})[host] = {
        "seconds": seconds, "start": start, "nvml_error": why_not, "xids": sampler.get("xids") or [], "nvml": nvml,
        **{k: sampler.get(k) for k in ("nvml_findings", "nvml_lost", "nvml_unsupported", "nvml_api", "nvml_died")
           if sampler.get(k)},
        "gpus": {str(s): {"bus_id": e.get("bus_id"), "intervals": e.get("intervals"), "steps": e.get("steps")}
                 for s, e in ok.items()}}
    verdicts = {int(x.gpu.rsplit(":", 1)[1]): x for x in judge_burn.judge(
        {f"{host}:{s}": xs for s, xs in series.items() if xs}, window_of(seconds))}
    no_nvml = f"; {why_not}: throughput over time only" if nvml is None else ""
    statuses = []
    for s in slots:
        e = mine.get(s) or {}
        x = verdicts.get(s)
        gpu = bus_key(e.get("bus_id"))
        nvml_said = "; ".join(found.pop(gpu, [])) if gpu else ""
        if e.get("status") != "ok" or x is None:
            measured = bool(e.get("measured"))
            status = "FAIL" if measured or gpu in lost else "ERROR"
            why = e.get("reason") or ("no throughput interval recorded" if e else "no report")
            v.add_gpu("burn", host, s, status, reason=f"{'its burn failed' if measured else 'not measured'}: {why}"
                      + (f"; {nvml_said}" if nvml_said else ""), t0=t0,
                      action=_action("gpu-unreachable") if gpu in lost else "")
            statuses.append(status)
            continue
        status, line, code = x.status, x.line + no_nvml, x.code
        if unsupported.get(gpu):
            line += f"; {GPU_SAMPLER} gives no {', '.join(unsupported[gpu])} for it (NotSupported: unknown)"
        if nvml_said:
            line += f"; {nvml_said}"
            if gpu in lost:
                status, code = "FAIL", "gpu-unreachable"
            elif status == "PASS":
                status = "WARN"  # a reading the sampler failed on: what was not read cannot be said fine
        if status == "FAIL" and nvml is None:
            # Throughput alone cannot tell a throttle from a scheduler's slice (CPU ranks on shared cores): without
            # the sampler's clocks and reasons a burn FAIL is not earned.
            status, line = "WARN", line + "; WARN at most: no clocks to tell a throttle from the scheduler"
        raised = ecc.get(bus_key(e.get("bus_id"))) or 0
        if raised > 0:
            status, code = "FAIL", "ecc-uncorrectable-volatile"
            line += f"; {raised} uncorrectable ECC error(s) raised during the burn"
        value = (f"{x.summary.first:.4g} -> {x.summary.last:.4g} {'img/s' if x.summary.by == 'throughput' else 'MHz'}"
                 f" over {seconds:.0f} s") if x.summary.first is not None and x.summary.last is not None else ""
        v.add_gpu("burn", host, s, status, value, f"its first {x.summary.span} and the node's other GPUs", line,
                  t0=t0, figure=x.summary.last, action=_action(code))
        statuses.append(status)
    xids = sampler.get("xids") or []
    said = (f"{len(slots)} GPU(s) at once for {seconds:.0f} s; " +
            (f"{why_not}: throughput over time only" if nvml is None else
             f"{GPU_SAMPLER} sampled each second, {len(cols)} GPU(s)")
            + (f"; Xid {', '.join(str(x['xid']) + ' on ' + str(x['bus_id']) for x in xids)} raised meanwhile "
               f"({', '.join(sorted({xid_code(x['xid']) for x in xids}))}: the health check's kernel log judges "
               "them)" if xids else "; no Xid raised" if nvml is not None else ""))
    worst = max(statuses, key=RANK.__getitem__) if statuses else "ERROR"
    tool = _tool_said(sampler)
    others = [f for fs in found.values() for f in fs]   # GPUs of no slot here (or named by index only)
    if others:
        said += "; " + "; ".join(others)
        worst = max(worst, "FAIL" if lost & set(found) else "WARN", key=RANK.__getitem__)
    if tool:
        said += f"; {tool}"
        worst = max(worst, "WARN", key=RANK.__getitem__)
    v.add("burn", host, worst, said, "its GPUs' rows", "(summary row)", t0=t0)


def _tool_said(sampler: dict) -> str:
    """The sampler's own failures, for the node's row: its thread's death and the binding's functions it could not use."""
    parts = []
    if sampler.get("nvml_died"):
        parts.append(f"{GPU_SAMPLER}'s sampler thread died: {sampler['nvml_died']}; the clocks after it are missing")
    parts += [f"{GPU_SAMPLER} API: {a}" for a in sampler.get("nvml_api") or []]
    return "; ".join(parts)


def _action(code: str | None) -> str:
    try:
        return entry(code)["action"] if code else ""
    except KeyError:
        return ""


def burn(v: Validation) -> None:
    t0 = time.time()
    seconds = v.cfg.burn_s()
    if seconds <= 0:
        for h in v.resources:
            v.add("burn", h, "SKIP", reason=f"off at --level {v.cfg.level} (--burn DURATION turns it on; 3m is "
                                            "the full level's)", host=h)
        return
    v.skip_left_out("burn", per_gpu=True)
    res = v.good_resources()
    if not res:
        return
    got = runs.phase_entries(v, res, "burn")
    by_key = {(r["host"], r["slot"]): r for r in got.ranks}
    for host, slots in res.items():
        mine = {s: by_key[(host, s)] for s in slots if (host, s) in by_key}
        if not mine and got.error:
            mine = {s: {"status": "failed", "reason": got.error.get("reason")} for s in slots}
        _node(v, host, slots, mine, seconds, t0)
