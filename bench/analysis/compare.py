"""Two sets of records, figure by figure: what changed by more than the threshold and the run-to-run spread.

    base, new = samples(base_records), samples(new_records)   # {Subject: {figure: [values]}}
    result = compare(base, new, threshold=0.05)
    result.rows, result.regressions, result.incomparable

A subject is one thing measured the same way on both sides: a run (its
model, batch, engine, ZeRO stage, precision... and its world size), a
sweep point (suite, point id and the same config), a comm row (op, size,
ranks, group), a node or the cluster in a validate run (level, host).
Settings that do not change what is measured (where results go, timeouts,
the launcher, ports) are left out of the identity. Several records of one
subject on a side are repeats: their mean is compared, and their spread
decides what a change means.

A figure regressed when it is a throughput or a bandwidth (higher is
better), fell by more than the threshold, and, where both sides have
repeats, by more than the spread: twice the standard error of the
difference of the means, 2 sqrt(s_b^2/n_b + s_n^2/n_n), relative to the
baseline mean. With fewer than two records on either side the spread is
unknown (None) and the threshold alone decides; the row says so. Step and
collective times are shown, not judged (they move with the throughput).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from bench.analysis.report_analysis import dedupe
from bench.core import results
from bench.core.errors import BadInput

# RunConfig fields that say how and where a run went, not what it measured.
OPERATIONAL = frozenset({"out", "timeout", "collective_timeout", "launcher", "container_exec", "master_addr", "master_port", "strict",
                         "data_dir", "download", "gpus", "breakdown"})
JUDGED = ("images_per_s", "busbw")  # higher is better; a fall beyond threshold and spread is a regression


def parse_threshold(text: str, option: str = "--threshold") -> float:
    """'5%' or '0.05' -> 0.05; BadInput naming the option otherwise."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise BadInput(f"{option}: {text!r} is not a share (5% or 0.05)") from None
    if not 0 < value < 1:
        raise BadInput(f"{option}: {text!r} must be between 0 and 100%")
    return value


@dataclass(frozen=True, order=True)
class Subject:
    label: str                       # what a reader sees: "run vit-micro-p4-32 x2", "comm all_reduce 4096 B x3 all"
    identity: tuple = ()             # (key, value) pairs that must match for two records to be comparable


@dataclass
class Row:
    subject: str
    figure: str
    base: list[float]
    new: list[float]
    change: float | None             # new mean / base mean - 1
    spread: float | None             # relative, 2 standard errors of the difference; None without repeats
    verdict: str                     # "regressed", "improved", "same", "shown" (not judged)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "figure": self.figure, "base": stats(self.base), "new": stats(self.new),
                "change": self.change, "spread": self.spread, "verdict": self.verdict}


@dataclass
class Result:
    threshold: float
    rows: list[Row] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    incomparable: list[str] = field(default_factory=list)  # same label, different identity: what differs

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "regressed"]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "compare", "threshold": self.threshold, "rows": [r.to_dict() for r in self.rows],
                "regressions": [f"{r.subject}: {r.figure}" for r in self.regressions],
                "only_baseline": self.only_base, "only_new": self.only_new, "incomparable": self.incomparable}


def _mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def _sd(xs: list[float]) -> float:
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def stats(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "mean": _mean(xs) if xs else None, "sd": _sd(xs) if len(xs) >= 2 else None}


def _identity(config: dict[str, Any], **extra: Any) -> tuple:
    items = {k: v for k, v in config.items() if k not in OPERATIONAL}
    items.update(extra)
    return tuple(sorted((k, repr(v)) for k, v in items.items()))


def _add(out: dict[Subject, dict[str, list[float]]], subject: Subject, figure: str, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        out.setdefault(subject, {}).setdefault(figure, []).append(float(value))


def samples(records: list[dict[str, Any]]) -> dict[Subject, dict[str, list[float]]]:
    """Every ok record's headline figures by subject (failed, oom and interrupted records measure nothing)."""
    out: dict[Subject, dict[str, list[float]]] = {}
    for rec in records:
        if rec.get("status") != "ok":
            continue
        kind = rec.get("kind")
        if kind in ("run", "point"):
            cfg, fig = rec.get("config") or {}, rec.get("figures") or {}
            world = fig.get("world_size") or (rec.get("plan") or {}).get("world_size")
            nodes = (rec.get("plan") or {}).get("nodes")
            if kind == "point":
                label = f"{rec.get('suite')} {rec.get('point_id')}"
            else:
                label = f"run {cfg.get('model')} x{world}" + (f" on {nodes} nodes" if nodes and nodes > 1 else "")
            subject = Subject(label, _identity(cfg, world_size=world, nodes=nodes))
            _add(out, subject, "images_per_s", fig.get("images_per_s"))
            _add(out, subject, "step_s", (fig.get("step_s") or {}).get("mean"))
        elif kind == "comm":
            plan = rec.get("plan") or {}
            for row in rec.get("rows") or []:
                subject = Subject(f"comm {row['op']} {row['size']} B x{row['ranks']} {row['group']}",
                                  _identity({}, device=plan.get("device"), nodes=plan.get("nodes")))
                _add(out, subject, "busbw", row.get("busbw"))
                _add(out, subject, "time_s", (row.get("time_s") or {}).get("median"))
        elif kind == "validate":
            level, m = rec.get("level"), rec.get("measured") or {}
            # Each GPU alone (host:slot), each node's GPUs together, each node's links inside and to others.
            for name, ips in {**(m.get("gpu_images_per_s") or {}), **(m.get("node_images_per_s") or {})}.items():
                _add(out, Subject(f"validate {level} {name}"), "images_per_s", ips)
            for host, bw in (m.get("intra_busbw") or {}).items():
                _add(out, Subject(f"validate {level} {host} intra-node"), "busbw", bw)
            for host, bw in (m.get("node_busbw") or {}).items():
                _add(out, Subject(f"validate {level} {host} inter-node"), "busbw", bw)
            dp = m.get("dp") or {}
            if dp:
                _add(out, Subject(f"validate {level} cluster x{dp.get('world_size')}"), "images_per_s",
                     dp.get("images_per_s"))
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


def _differs(a: tuple, b: tuple) -> str:
    da, db = dict(a), dict(b)
    keys = sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
    return ", ".join(f"{k} {da.get(k, '-')} vs {db.get(k, '-')}" for k in keys)


def compare(base: dict[Subject, dict[str, list[float]]], new: dict[Subject, dict[str, list[float]]],
            threshold: float) -> Result:
    res = Result(threshold)
    for subject in sorted(set(base) | set(new)):
        if subject in base and subject in new:
            for figure in sorted(set(base[subject]) & set(new[subject])):
                res.rows.append(_row(subject.label, figure, base[subject][figure], new[subject][figure], threshold))
            continue
        twins = [s for s in (new if subject in base else base) if s.label == subject.label]
        if twins and subject in base:
            res.incomparable.append(f"{subject.label}: {_differs(subject.identity, twins[0].identity)}")
        elif not twins:
            (res.only_base if subject in base else res.only_new).append(subject.label)
    return res


def _row(label: str, figure: str, b: list[float], n: list[float], threshold: float) -> Row:
    mb, mn = _mean(b), _mean(n)
    change = mn / mb - 1
    spread = (2 * math.sqrt(_sd(b) ** 2 / len(b) + _sd(n) ** 2 / len(n)) / mb
              if len(b) >= 2 and len(n) >= 2 else None)
    if figure not in JUDGED:
        verdict = "shown"
    elif abs(change) > threshold and (spread is None or abs(change) > spread):
        verdict = "regressed" if change < 0 else "improved"
    else:
        verdict = "same"
    return Row(label, figure, b, n, change, spread, verdict)
