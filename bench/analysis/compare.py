"""Two sets of records, figure by figure: what changed by more than the threshold and the run-to-run spread.

    base, new = samples(base_records), samples(new_records)   # {Subject: {figure: [values]}}, .failed
    result = compare(base, new, threshold=0.05)
    result.rows, result.regressions, result.lost, result.incomparable

What a subject is, and its identity: bench.analysis.compare_subjects.
Several records of one subject on a side are repeats: their mean is
compared, and their spread decides what a change means.

A figure regressed when it is a throughput or a bandwidth (higher is
better), fell by more than the threshold, and, where both sides have
repeats, by more than the spread: twice the standard error of the
difference of the means, 2 sqrt(s_b^2/n_b + s_n^2/n_n), relative to the
baseline mean. With fewer than two records on either side the spread is
unknown (None) and the threshold alone decides; the row says so. Step and
collective times are shown, not judged (they move with the throughput).

A crash is a regression too: a subject ok in the baseline that failed, ran
out of memory, was interrupted or is missing in the new records is `lost`
(named with the new record's reason). One that failed in both is reported,
not counted; one that failed before and is ok now is reported as recovered.
A subject whose label matches but whose identity differs is `incomparable`:
the fields that differ are named, and bench compare refuses to judge it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.analysis.compare_subjects import NOT_RECORDED, OPERATIONAL, Outcome, Samples, Subject, load, samples
from bench.core.errors import BadInput

__all__ = ["OPERATIONAL", "JUDGED", "Subject", "Samples", "Outcome", "Row", "Lost", "Result", "samples", "load",
           "compare", "parse_threshold", "stats"]

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
class Lost:
    """A subject that measured nothing on one side: what each side holds of it, and the verdict."""
    subject: str
    base: str                        # "ok x2", "oom", "missing"
    new: str
    reason: str                      # the new record's reason (the baseline's when only it failed)
    verdict: str                     # "regressed" (ok before), "failed in both", "recovered", "failed before"

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "base": self.base, "new": self.new, "reason": self.reason,
                "verdict": self.verdict}


@dataclass
class Result:
    threshold: float
    rows: list[Row] = field(default_factory=list)
    outcomes: list[Lost] = field(default_factory=list)     # subjects that failed on a side, and their verdict
    only_base: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    incomparable: list[str] = field(default_factory=list)  # same label, different identity: what differs
    matched: int = 0                                       # subjects both sides hold (ok or not)

    @property
    def regressions(self) -> list[Row]:
        """Figures that fell (bench validate's baseline check reads these)."""
        return [r for r in self.rows if r.verdict == "regressed"]

    @property
    def lost(self) -> list[Lost]:
        """Subjects ok in the baseline that failed, ran out of memory or are missing now: regressions too."""
        return [x for x in self.outcomes if x.verdict == "regressed"]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "compare", "threshold": self.threshold, "rows": [r.to_dict() for r in self.rows],
                "regressions": [f"{r.subject}: {r.figure}" for r in self.regressions]
                + [f"{x.subject}: {x.base} -> {x.new}" for x in self.lost],
                "outcomes": [x.to_dict() for x in self.outcomes],
                "only_baseline": self.only_base, "only_new": self.only_new, "incomparable": self.incomparable}


def _mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def _sd(xs: list[float]) -> float:
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def stats(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "mean": _mean(xs) if xs else None, "sd": _sd(xs) if len(xs) >= 2 else None}


def _differs(a: tuple, b: tuple) -> str:
    da, db = dict(a), dict(b)
    keys = sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
    return ", ".join(f"{k} {da.get(k, NOT_RECORDED)} vs {db.get(k, NOT_RECORDED)}" for k in keys)


def _held(side: dict, failed: dict, subject: Subject) -> str:
    """What one side holds of a subject, in a word: "ok x2", "oom", "ok x1, failed x1", "missing"."""
    parts = []
    if subject in side:
        parts.append(f"ok x{max(len(v) for v in side[subject].values())}")
    statuses = [o.status for o in failed.get(subject, [])]
    parts += [f"{s} x{statuses.count(s)}" if statuses.count(s) > 1 else s for s in dict.fromkeys(statuses)]
    return ", ".join(parts) or "missing"


def _outcome(subject: Subject, base: dict, bf: dict, new: dict, nf: dict) -> Lost | None:
    """The verdict on a subject held by both sides where one of them failed (None: both only ok)."""
    b_bad, n_bad = bf.get(subject, []), nf.get(subject, [])
    held = (_held(base, bf, subject), _held(new, nf, subject))
    if n_bad:
        verdict = "failed in both" if b_bad or subject not in base else "regressed"
        return Lost(subject.label, *held, n_bad[-1].reason, verdict)
    if b_bad:
        return Lost(subject.label, *held, b_bad[-1].reason, "recovered" if subject in new else "failed before")
    return None


def compare(base: dict[Subject, dict[str, list[float]]], new: dict[Subject, dict[str, list[float]]],
            threshold: float) -> Result:
    """Every subject of either side: figure rows where both measured it, outcomes where one failed."""
    res = Result(threshold)
    bf, nf = getattr(base, "failed", {}), getattr(new, "failed", {})
    in_base, in_new = set(base) | set(bf), set(new) | set(nf)
    for subject in sorted(in_base | in_new):
        if subject in in_base and subject in in_new:
            res.matched += 1
            if subject in base and subject in new:
                for figure in sorted(set(base[subject]) & set(new[subject])):
                    res.rows.append(_row(subject.label, figure, base[subject][figure], new[subject][figure],
                                         threshold))
            lost = _outcome(subject, base, bf, new, nf)
            if lost is not None:
                res.outcomes.append(lost)
            continue
        # A twin: the same label on the other side, under another identity, that has no match of its own.
        mine, other = (in_base, in_new) if subject in in_base else (in_new, in_base)
        twins = [s for s in other if s.label == subject.label and s not in mine]
        if twins and subject in in_base:
            res.incomparable.append(f"{subject.label}: {_differs(subject.identity, twins[0].identity)}")
        elif twins:
            continue
        elif subject in base:
            res.outcomes.append(Lost(subject.label, _held(base, bf, subject), "missing",
                                     "not in the new records", "regressed"))
        elif subject in in_base:
            res.only_base.append(subject.label)  # failed before, not run now: nothing to judge
        else:
            res.only_new.append(subject.label)
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
