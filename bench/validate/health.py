"""validate's health check: each node's own counters and kernel log, judged by one table of meanings and actions.

    bench validate --level health                    # this node, seconds, no GPU time (HealthCheckProgram)
    bench validate --level health --since-job        # an epilog: only the Xids this job's time raised
    bench validate --health-from saved/node7         # one node's saved reports, offline: same verdict

The reports are read by the probe's own process on every node, in the
inventory's one launch (bench.cluster.probe with a HealthAsk), or from a
folder of saved outputs (--health-from); bench.cluster.health parses them
and looks every finding up in bench/data/health_actions.json (severity,
action, source). Rows, per node and per GPU it names:
  FAIL    a finding whose severity drains the node (its action: reset the GPU, reseat, replace, drain...);
  WARN    a finding to watch;
  ERROR   a source that should have been readable and was not (permission, a tool that crashed);
  SKIP    nothing here to read (no GPU on this node, no InfiniBand, dcgmi not installed);
  PASS    what was read, with no finding.
A GPU that FAILs here is left out of the later checks (a GPU with a row remap
pending trains at full speed, but its memory cannot be trusted until reset).
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.analysis import copies
from bench.cluster import nvlink_domains as domains
from bench.cluster.findings import finding, sort_key
from bench.cluster.inventory import HealthAsk
from bench.cluster.slurm import job_start
from bench.validate.state import Validation

_STATUS = {"fail": "FAIL", "warn": "WARN"}


def since_of(cfg) -> float | None:
    """The time kernel-log events count from: --since-job, --since TIME (parsed by bench.core.options.moment),
    else None (since boot)."""
    return job_start() if cfg.since_job else cfg.since


def health_request(v: Validation) -> HealthAsk | None:
    """What the inventory's probe also reads, where the health check is asked for: in seconds, inside the
    inventory's wait. DCGM's diagnostic, minutes long, is a stage of its own (bench.validate.dcgm)."""
    if not v.cfg.wanted("health"):
        return None
    return HealthAsk(since=since_of(v.cfg), dcgm_level=None,
                     folders=tuple(dict.fromkeys((os.path.abspath(v.cfg.out), "/tmp"))))


def _slot_of(v: Validation, host: str, finding: dict[str, Any]) -> int | None:
    """The selected slot a finding's GPU is, or None (a node's finding, or a GPU not selected)."""
    index = finding.get("gpu_index")
    return index if index is not None and index in v.resources.get(host, []) else None


def _said(found: list[dict[str, Any]]) -> tuple[str, str]:
    """(value, reason) of a row's findings, worst first. The reason names what each finding is about (the port,
    the DCGM test, the GPU: its `what`) and says each code's meaning and action once: the one line a person
    reads (--level health, prolog) is the reason, and "a port is not Active" three times named no port."""
    value = "; ".join(f"{f['code']}: {f['what']}" for f in found)
    by_code: dict[str, list[dict[str, Any]]] = {}
    for f in found:
        by_code.setdefault(f["code"], []).append(f)
    reason = "; ".join(f"{code} ({fs[0]['severity']}): {' / '.join(dict.fromkeys(f['what'] for f in fs))}: "
                       f"{fs[0]['meaning']}; action: {fs[0]['action']}" for code, fs in by_code.items())
    return value, reason


def judge(v: Validation, host: str, report: dict[str, Any], t0: float, check: str = "health") -> None:
    """The rows of one node's health report: one per selected GPU it read, one for the node (check: the rows'
    check, "dcgm" for a report of DCGM's diagnostic alone)."""
    ref = "bench/data/health_actions.json"

    def judged_by(f: dict[str, Any]) -> str:  # the finding's sources stay in the record (measured.health)
        return f"health table: {f['code']}"
    by_slot: dict[int | None, list[dict]] = {}
    for f in report.get("findings") or []:
        if f.get("severity") in _STATUS:
            by_slot.setdefault(_slot_of(v, host, f), []).append(f)
    for found in by_slot.values():
        found.sort(key=lambda f: f["severity"] != "fail")
    read_gpus = {g.get("index") for g in report.get("gpus") or []}
    for slot in v.resources.get(host, []):
        found = by_slot.get(slot)
        if found:
            value, reason = _said(found)
            v.add_gpu(check, host, slot, _STATUS[found[0]["severity"]], value, judged_by(found[0]), reason, t0=t0,
                      action=found[0]["action"])
        elif slot in read_gpus:
            v.add_gpu(check, host, slot, "PASS", "no finding", ref, "its counters read, no finding", t0=t0)
    found = by_slot.get(None) or []
    unread = [m for m in report.get("not_read") or [] if m.get("expected")]
    absent = [m for m in report.get("not_read") or [] if not m.get("expected")]
    notes = ([f"could not read {m['source']}: {m['reason']}" for m in unread]
             + [f"nothing to read: {m['source']}: {m['reason']}" for m in absent])
    since = "" if check != "health" else f" since {report['since']}" if report.get("since") else " since boot"
    if found:
        value, reason = _said(found)
        # A GPU the run did not select is still the node's: the next job on it would use it.
        named = [f"GPU {f['gpu_index']} ({f.get('bus_id') or '?'}) is not selected here" for f in found
                 if f.get("gpu_index") is not None]
        status = "FAIL" if found[0]["severity"] == "fail" else "ERROR" if unread else "WARN"
        v.add_node(check, host, status, value, judged_by(found[0]),
                   "; ".join([reason, *dict.fromkeys(named), *notes]), t0=t0, action=found[0]["action"])
        return
    read = report.get("read") or {}
    value = "; ".join(f"{k}: {x}" for k, x in read.items()) or "nothing read"
    if unread:
        v.add_node(check, host, "ERROR", value, ref, "; ".join(notes), t0=t0)
    else:
        v.add_node(check, host, "PASS", value, ref, "; ".join([f"no finding{since}", *notes]), t0=t0)


def judge_copies(report: dict[str, Any]) -> dict[str, Any]:
    """The report with its copy figures (a saved nvbandwidth.txt's) judged by bench.analysis.copies: a finding
    (copy-slow, copy-low, memory-copy-slow, memory-copy-low) per WARN or FAIL, and every verdict's line in
    "copies_judged". GPU-to-GPU and both-directions figures stay in the record unjudged: they measure links,
    judged by the links check, not the GPU's host path or memory."""
    figs = [{"gpu": f"GPU {'?' if c.get('gpu_index') is None else c['gpu_index']} ({c.get('bus_id') or 'bus ?'})",
             "model": c.get("name"), "kind": c["kind"], "method": c.get("method"), "gbps": c["gbps"],
             "pcie_gen": c.get("pcie_gen_max"), "pcie_width": c.get("pcie_width_max"), "copy": c}
            for c in report.get("copies") or () if c.get("kind") in copies.HOST + copies.MEMORY]  # fmt: skip
    if not figs:
        return report
    verdicts = copies.judge(figs)
    found = [finding(r.code, "nvbandwidth", r.line, bus_id=f["copy"].get("bus_id"),
                     gpu_index=f["copy"].get("gpu_index")) for f, r in zip(figs, verdicts) if r.code]
    return dict(report, findings=sorted([*(report.get("findings") or ()), *found], key=sort_key),
                copies_judged=[{"gpu": r.gpu, "kind": r.kind, "status": r.status, "line": r.line} for r in verdicts])


def nvlink_domains(v: Validation, reports: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The reports with each node's NVLink-domain findings added (its GPUs disagree, or it is alone in its
    domain), the domains in the record (figures "nvlink_domains") and, where there are any, as leaves of the
    topology the pairs are chosen by (bench.cluster.nvlink_domains)."""
    d = domains.group({h: r.get("fabric") or [] for h, r in reports.items()})
    if not (d.domains or d.split or d.alone):
        return reports
    v.figures["nvlink_domains"] = d.record()
    if d.domains:
        v.tree = d.tree(v.tree)
    extra = d.findings()
    return {h: dict(r, findings=sorted([*(r.get("findings") or ()), *extra[h]], key=sort_key)) if h in extra else r
            for h, r in reports.items()}  # fmt: skip


def health(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("health")
    reports = {}
    for host in v.good:
        report = v.health_reports.get(host) or (v.inventory.get(host) or {}).get("health")
        if report is None:
            v.add_node("health", host, "ERROR", reason="its probe brought no health report", t0=t0)
            continue
        reports[host] = judge_copies(report)
    for host, report in nvlink_domains(v, reports).items():
        v.figures.setdefault("health", {})[host] = report
        judge(v, host, report, t0)
