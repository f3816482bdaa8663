"""What bench compare compares: each record's subjects, their identity, and what a side measured of them.

    got = samples(records)       # Samples: {Subject: {figure: [values]}}, and got.failed: {Subject: [Outcome]}

A subject is one thing measured the same way on both sides: a run (its
model, batch, engine, ZeRO stage, precision... and its world size), a
sweep point (suite, point id and the same config), a comm row (op, size,
ranks, group), a node or the cluster in a validate run (level, host, and
the identity the validate record carries). Settings that do not change
what is measured (where results go, timeouts, the launcher, ports) are left
out of the identity; a user --deepspeed-config is identified by its
content's hash, which the run record carries, not by its path, and
--breakdown (DeepSpeed's timers synchronise the device around each part)
is part of it.

A record that measured nothing (failed, oom, interrupted, skipped) is no
sample, but it is not dropped either: its subjects go into `failed` with
the record's status and reason, so a subject that was ok before and crashed
now is a regression, not a subject "only in the baseline".
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from bench.analysis.report_analysis import dedupe
from bench.core import results

# RunConfig fields that say how and where a run went, not what it measured.
OPERATIONAL = frozenset({"out", "timeout", "collective_timeout", "launcher", "container_exec", "master_addr", "master_port", "strict",
                         "data_dir", "download", "gpus"})
NOT_RECORDED = "not recorded"


@dataclass(frozen=True, order=True)
class Subject:
    label: str                       # what a reader sees: "run vit-micro-p4-32 x2", "comm all_reduce 4096 B x3 all"
    identity: tuple = ()             # (key, value) pairs that must match for two records to be comparable


@dataclass(frozen=True)
class Outcome:
    """A record of a subject that measured nothing: its status and why."""
    status: str
    reason: str


class Samples(dict):
    """{Subject: {figure: [values]}} of the ok records, and `failed`: {Subject: [Outcome]} of the others."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: dict[Subject, list[Outcome]] = {}


def _identity(config: dict[str, Any], **extra: Any) -> tuple:
    items = {k: v for k, v in config.items() if k not in OPERATIONAL}
    items.update(extra)
    return tuple(sorted((k, repr(v)) for k, v in items.items()))


def run_identity(rec: dict[str, Any], world: Any, nodes: Any) -> tuple:
    """A run's or point's identity: its config (the user DeepSpeed JSON by content), world size, node count."""
    cfg = dict(rec.get("config") or {})
    if cfg.get("deepspeed_config") is not None:
        digest = rec.get("deepspeed_config_sha256")
        cfg["deepspeed_config"] = f"sha256:{digest}" if digest else f"{NOT_RECORDED} (path {cfg['deepspeed_config']})"
    return _identity(cfg, world_size=world, nodes=nodes)


def validate_identity(rec: dict[str, Any]) -> tuple:
    """What a validate run measured with (precision, model, micro batch, steps, checks), from its record."""
    ident = rec.get("identity")
    return _identity(ident) if isinstance(ident, dict) else ()


def _add(out: Samples, subject: Subject, figure: str, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        out.setdefault(subject, {}).setdefault(figure, []).append(float(value))


def _reason(rec: dict[str, Any]) -> str:
    err = rec.get("error") or {}
    reason = err.get("reason") or rec.get("reason") or "no reason recorded"
    where = [f"rank {err['rank']}" if err.get("rank") is not None else "", err.get("host") or ""]
    where = " on ".join(w for w in where if w)
    return f"{reason} ({where})" if where and where not in str(reason) else str(reason)


def _fail(out: Samples, subject: Subject, rec: dict[str, Any], reason: str | None = None) -> None:
    out.failed.setdefault(subject, []).append(Outcome(str(rec.get("status")), reason or _reason(rec)))


def _training(out: Samples, rec: dict[str, Any]) -> None:
    cfg, fig, plan = rec.get("config") or {}, rec.get("figures") or {}, rec.get("plan") or {}
    world = fig.get("world_size") or plan.get("world_size")
    nodes = plan.get("nodes")
    if rec["kind"] == "point":
        label = f"{rec.get('suite')} {rec.get('point_id')}"
    else:
        label = f"run {cfg.get('model')} x{world}" + (f" on {nodes} nodes" if nodes and nodes > 1 else "")
    subject = Subject(label, run_identity(rec, world, nodes))
    if rec.get("status") != "ok":
        _fail(out, subject, rec)
        return
    _add(out, subject, "images_per_s", fig.get("images_per_s"))
    _add(out, subject, "step_s", (fig.get("step_s") or {}).get("mean"))


def _comm(out: Samples, rec: dict[str, Any]) -> None:
    plan = rec.get("plan") or {}
    ident = _identity({}, device=plan.get("device"), nodes=plan.get("nodes"))
    rows = rec.get("rows") or []
    if rec.get("status") != "ok":
        spec = rec.get("comm") or {}
        groups, names = spec.get("groups") or [], spec.get("group_names") or []
        # A comm run that died has no rows: its subjects are the rows it was asked for.
        keys = [(r["op"], r["size"], r["ranks"], r["group"]) for r in rows] or [
            (spec.get("op"), size, len(g), name) for g, name in zip(groups, names) for size in spec.get("sizes") or []]
        for op, size, ranks, group in keys:
            _fail(out, Subject(f"comm {op} {size} B x{ranks} {group}", ident), rec)
        return
    for row in rows:
        subject = Subject(f"comm {row['op']} {row['size']} B x{row['ranks']} {row['group']}", ident)
        _add(out, subject, "busbw", row.get("busbw"))
        _add(out, subject, "time_s", (row.get("time_s") or {}).get("median"))


def _validate_failures(rec: dict[str, Any]) -> dict[str, list[str]]:
    """The subjects a validate record FAILed, with the checks: a GPU's row its GPU, a node's link row that
    link, a node's other rows (preflight, inventory) all its GPUs and links."""
    slots = rec.get("resources") or {}
    out: dict[str, list[str]] = {}
    for c in rec.get("checks") or []:
        host, gpu = c.get("host"), c.get("gpu")
        if c.get("status") != "FAIL" or host is None or c.get("check") == "baseline":
            continue
        if gpu is not None:
            names = [f"{host}:{gpu}"]
        elif c.get("check") in ("intra-node", "inter-node"):
            names = [f"{host} {c['check']}"]
        else:
            names = [f"{host}:{s}" for s in slots.get(host, [])] + [f"{host} intra-node", f"{host} inter-node"]
        for name in names:
            out.setdefault(name, []).append(c["check"])
    return out


def _validate(out: Samples, rec: dict[str, Any]) -> None:
    """Per GPU (host:slot) its throughput alone, per node its links inside and to others, the cluster's
    data-parallel run; what the record FAILed is a failed subject (a regression where it was ok before).
    Records from before per-GPU rows judged a node by its one rank alone (node_images_per_s)."""
    level, m = rec.get("level"), rec.get("measured") or {}
    ident = validate_identity(rec)
    failed = _validate_failures(rec)
    for name, checks in failed.items():
        _fail(out, Subject(f"validate {level} {name}", ident), rec,
              f"validate FAIL: {', '.join(dict.fromkeys(checks))}")
    if rec.get("status") not in ("ok", "failed"):
        return  # interrupted: what it measured is not a whole run's
    for name, ips in (m.get("gpu_images_per_s") or m.get("node_images_per_s") or {}).items():
        if name not in failed:
            _add(out, Subject(f"validate {level} {name}", ident), "images_per_s", ips)
    for key, check in (("intra_busbw", "intra-node"), ("node_busbw", "inter-node")):
        for host, bw in (m.get(key) or {}).items():
            if f"{host} {check}" not in failed:
                _add(out, Subject(f"validate {level} {host} {check}", ident), "busbw", bw)
    dp = m.get("dp") or {}
    if dp:
        _add(out, Subject(f"validate {level} cluster x{dp.get('world_size')}", ident), "images_per_s",
             dp.get("images_per_s"))


def samples(records: list[dict[str, Any]]) -> Samples:
    """Every ok record's headline figures by subject; the subjects of the other records in `.failed`."""
    out = Samples()
    for rec in records:
        kind = rec.get("kind")
        if kind in ("run", "point"):
            _training(out, rec)
        elif kind == "comm":
            _comm(out, rec)
        elif kind == "validate":
            _validate(out, rec)
    return out


def load(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of one side (a results folder, a results.jsonl, a validate run): (records, skipped lines).

    The runs and comm measurements a validate run made for its checks are its
    own, not results of their own: only its validate record counts. Of a
    sweep, the latest record of each point (bench report's rule).
    """
    found: list[tuple[str, dict[str, Any]]] = []
    skipped: list[str] = []
    for file in results.iter_result_files([path]):
        rr = results.read(file)
        skipped.extend(rr.skipped)
        found.extend((os.path.dirname(os.path.abspath(file)), r) for r in rr.records)
    inside = {d for d, r in found if r.get("kind") == "validate"}

    def validates(d: str) -> bool:
        return any(d.startswith(v + os.sep) for v in inside)

    kept = [r for d, r in found if r.get("kind") == "validate" or not validates(d)]
    training = dedupe([r for r in kept if r.get("kind") in ("run", "point")])
    return training + [r for r in kept if r.get("kind") in ("comm", "validate")], skipped
