"""Do GPUs that should compute the same bits compute them? The numerics check's judgement, from the ranks' curves.

    verdicts = judge(ranks, references)
    for v in verdicts: v.key, v.status, v.reason, v.first_step

Each rank ran the same deterministic job (bench.worker.numerics) and
reports its loss at every step (exactly) and a SHA-256 of its parameters
after the last one. Ranks are grouped by their stack: device model (and
driver), torch, CUDA, cuDNN, CPU capability: within a group the results
must be bit-identical (METRICS.md, "Numerics"). Per group:
  - with a reference curve for that stack and job: every rank must match it;
  - else with two or more ranks: the curve most of them share (more than
    half) is right, every other rank FAILs, naming the first differing step
    and the ranks it was compared with; without such a majority every rank
    of the group FAILs (one of them is wrong and nothing says which);
  - else (one rank, no reference): SKIP, nothing to compare with.
A failed exact matmul (#wrong > 0, or two runs of one product that differ)
FAILs its rank whatever the curves say.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Verdict:
    key: str                     # "host:slot"
    status: str                  # PASS, FAIL, SKIP
    reason: str
    first_step: int | None = None
    compared_with: tuple[str, ...] = field(default=())
    judged_by: str = "none"      # "reference", "peers" or "none"


def first_difference(a: list[float], b: list[float]) -> int | None:
    """The first step whose losses differ bit for bit (float.hex), or None when none does."""
    for i, (x, y) in enumerate(zip(a, b)):
        if float(x).hex() != float(y).hex():
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _signature(r: dict) -> tuple:
    return tuple(float(x).hex() for x in r["losses"]), r["params_sha256"]


def _where(mine: dict, other_losses: list[float], other_digest: str) -> tuple[int, str]:
    """(first differing step, what differs there) between a rank and a curve it should equal."""
    step = first_difference(mine["losses"], other_losses)
    if step is None:  # the same losses: the weights after the last step differ
        last = len(mine["losses"]) - 1
        return last, "every loss equal, the parameters after the last step differ"
    if step >= min(len(mine["losses"]), len(other_losses)):
        return step, f"{len(mine['losses'])} steps against {len(other_losses)}"
    return step, f"loss {mine['losses'][step]!r} against {other_losses[step]!r}"


def stack_key(stack: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in stack.items()))


def find_reference(references: list[dict], stack: dict[str, Any], spec: dict[str, Any]) -> dict | None:
    """The reference curve made with this job on this stack (every field of its platform equal), or None."""
    for ref in references:
        if ref.get("spec") == spec and stack_key(ref.get("platform") or {}) == stack_key(stack):
            return ref
    return None


def judge(ranks: list[dict], spec: dict[str, Any], references: list[dict] | None = None) -> list[Verdict]:
    """One verdict per rank that reported a curve: ranks are {"key", "stack", "losses", "params_sha256",
    "matmul_exact"}; spec the job they all ran (bench.jobs.numerics.NumericsSpec.key())."""
    groups: dict[tuple, list[dict]] = {}
    for r in ranks:
        groups.setdefault(stack_key(r["stack"]), []).append(r)
    out: list[Verdict] = []
    for members in groups.values():
        ref = find_reference(references or [], members[0]["stack"], spec)
        names = [m["key"] for m in members]
        counts = Counter(_signature(m) for m in members)
        sig, n = counts.most_common(1)[0]
        majority = sig if n * 2 > len(members) else None
        for m in members:
            peers = tuple(k for k in names if k != m["key"])
            if ref is not None:
                if _signature(m) == (tuple(float(x).hex() for x in ref["losses"]), ref["params_sha256"]):
                    v = Verdict(m["key"], "PASS", f"bit-identical to the reference curve ({ref.get('source', '')[:60]})"
                                + (f" and to {len(peers)} peer(s)" if peers and _signature(m) == sig else ""),
                                compared_with=peers, judged_by="reference")
                else:
                    step, what = _where(m, ref["losses"], ref["params_sha256"])
                    v = Verdict(m["key"], "FAIL", f"differs from the reference curve for its stack from step {step}: "
                                f"{what}", step, peers, "reference")
            elif len(members) < 2:
                v = Verdict(m["key"], "SKIP", "no other GPU of this model and stack here, and no reference curve "
                            "for it: nothing to compare with")
            elif majority is None:
                v = Verdict(m["key"], "FAIL", f"no majority among the {len(members)} GPUs of this model and stack "
                            f"({len(counts)} different results): one of them computes wrong, nothing says which",
                            None, peers, "peers")
            elif _signature(m) == majority:
                v = Verdict(m["key"], "PASS", f"bit-identical to {n - 1} of {len(peers)} peer(s) of the same stack",
                            compared_with=peers, judged_by="peers")
            else:
                agree = [x["key"] for x in members if _signature(x) == majority]
                ok = next(x for x in members if _signature(x) == majority)
                step, what = _where(m, ok["losses"], ok["params_sha256"])
                v = Verdict(m["key"], "FAIL", f"differs from {len(agree)} GPU(s) of the same model and stack "
                            f"({', '.join(agree[:4])}{' ...' if len(agree) > 4 else ''}) from step {step}: {what}",
                            step, tuple(agree), "peers")
            exact = m.get("matmul_exact") or {}
            if exact.get("wrong") or exact.get("rerun_equal") is False:
                v = Verdict(m["key"], "FAIL", f"exact matmul ({exact.get('n')}x{exact.get('n')}, integer entries): "
                            f"{exact.get('wrong')} wrong row/column sum(s), same product twice "
                            f"{'equal' if exact.get('rerun_equal') else 'different'}; " + v.reason,
                            v.first_step, v.compared_with, v.judged_by)
            out.append(v)
    return out
