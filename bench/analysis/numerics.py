"""Do GPUs that should compute the same bits compute them? The numerics check's judgement, from the ranks' curves.

    verdicts = judge(ranks, references)
    for v in verdicts: v.key, v.status, v.reason, v.first_step

Each rank ran the same deterministic job (bench.worker.numerics) and
reports its loss at every step (exactly) and a SHA-256 of its parameters
after the last one. Ranks are grouped by their stack: device model (and
driver), torch, CUDA, cuDNN, CPU capability: within a group the results
must be bit-identical (docs/metrics.md, "Numerics"). Per group, by its peers:
the curve most of them share (more than half) is right, every other rank
FAILs, naming the first differing step and the ranks it was compared
with; without such a majority every rank of the group FAILs (one of them
is wrong and nothing says which); alone, SKIP. With a reference curve of
that stack and job, every rank must match it too: the user's curve
decides (a mismatch FAILs); the shipped one, made on one machine, FAILs a
rank its peers outvote and WARNs one that agrees with its peers but not
with the curve (the curve may not fit this machine).
A failed exact matmul (#wrong > 0, or two runs of one product that differ)
FAILs its rank whatever the curves say.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Verdict:
    key: str                     # "host:slot"
    status: str                  # PASS, FAIL, SKIP
    reason: str
    first_step: int | None = None
    compared_with: Sequence[str] = field(default=())  # a tuple, or Others
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


class Others(Sequence):
    """Every key of a stack's group but one rank's, in order, read-only: that rank's peers (a Verdict's
    compared_with). A tuple of them per rank held N^2 keys for a stack of N GPUs: half a GiB, and most of
    the numerics check's time, at 8,000 GPUs. Equal to the tuple of the same keys."""

    __slots__ = ("_names", "_i")

    def __init__(self, names: tuple[str, ...], i: int):
        self._names, self._i = names, i

    def __len__(self) -> int:
        return len(self._names) - 1

    def __getitem__(self, j):
        if isinstance(j, slice):
            return tuple(self)[j]
        if not -len(self) <= j < len(self):
            raise IndexError("peer index out of range")
        j %= len(self)
        return self._names[j + (j >= self._i)]

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(itertools.islice(self._names, self._i), itertools.islice(self._names, self._i + 1, None))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, Others)) and len(other) == len(self) and \
            all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


@dataclass(slots=True)
class _Group:
    """What every rank of one stack is judged against, worked out once for the group: per rank, it took N
    signatures and counts, N^2 for a stack of N GPUs (six CPU minutes at 8,000 GPUs)."""

    members: list[dict]
    names: tuple[str, ...]
    sigs: list[tuple]
    counts: Counter
    top: tuple[tuple, int]   # the commonest signature and how many ranks have it
    agree: list[str]         # the keys of the ranks that have it
    first: dict              # the first rank that has it
    unique: bool             # no two ranks share a key: a rank's peers are the names before and after it

    @classmethod
    def of(cls, members: list[dict]) -> "_Group":
        names = tuple(x["key"] for x in members)
        sigs = [_signature(x) for x in members]
        counts = Counter(sigs)
        top = counts.most_common(1)[0]
        agree = [i for i, s in enumerate(sigs) if s == top[0]]
        return cls(members, names, sigs, counts, top, [names[i] for i in agree], members[agree[0]],
                   len(set(names)) == len(names))

    def peers(self, i: int) -> Sequence[str]:
        if self.unique:
            return Others(self.names, i)
        return tuple(k for k in self.names if k != self.names[i])


def _peers(i: int, g: _Group) -> Verdict:
    """The verdict of rank i of a group by its peers of the same stack alone."""
    m, members = g.members[i], g.members
    peers = g.peers(i)
    if len(members) < 2:
        return Verdict(m["key"], "SKIP", "no other GPU of this model and stack here, and no reference curve for "
                       "it: nothing to compare with")
    counts = g.counts
    sig, n = g.top
    if n * 2 <= len(members):
        return Verdict(m["key"], "FAIL", f"no majority among the {len(members)} GPUs of this model and stack "
                       f"({len(counts)} different results): one of them computes wrong, nothing says which",
                       None, peers, "peers")
    if g.sigs[i] == sig:
        return Verdict(m["key"], "PASS", f"bit-identical to {n - 1} of its {len(peers)} peer(s) of the same stack",
                       compared_with=peers, judged_by="peers")
    agree, ok = g.agree, g.first
    step, what = _where(m, ok["losses"], ok["params_sha256"])
    return Verdict(m["key"], "FAIL", f"differs from {len(agree)} GPU(s) of the same model and stack "
                   f"({', '.join(agree[:4])}{' ...' if len(agree) > 4 else ''}) from step {step}: {what}",
                   step, tuple(agree), "peers")


def _against(m: dict, ref: dict, by_peers: Verdict, trusted: bool) -> Verdict:
    """A rank against the reference curve of its stack, with what its peers said.

    A trusted curve (the user's --numerics-reference) decides: a rank that differs FAILs. The shipped curve
    was made on one machine: where a rank agrees with its peers but not with it, the curve may not fit this
    machine as much as every GPU may be wrong, so that is a WARN; a rank its peers outvote still FAILs."""
    src = ref.get("source", "")[:60]
    ref_sig = (tuple(float(x).hex() for x in ref["losses"]), ref["params_sha256"])
    peers = by_peers.compared_with or ()
    if _signature(m) == ref_sig:
        return Verdict(m["key"], "PASS", f"bit-identical to the reference curve ({src})"
                       + (f"; {by_peers.reason}" if by_peers.status == "PASS" else ""), compared_with=peers,
                       judged_by="reference")
    step, what = _where(m, ref["losses"], ref["params_sha256"])
    differs = f"differs from the reference curve for its stack ({src}) from step {step}: {what}"
    if trusted or by_peers.status == "FAIL":
        return Verdict(m["key"], "FAIL", differs + (f"; {by_peers.reason}" if by_peers.status != "SKIP" else ""),
                       step if by_peers.status != "FAIL" else by_peers.first_step, peers, "reference")
    alone = by_peers.status == "SKIP"
    return Verdict(m["key"], "WARN", differs + ("; no peer to tell whether the GPU or the curve is off" if alone else
                   f"; {by_peers.reason}: the shipped curve may not fit this machine (make one with "
                   "--save-numerics-reference on nodes you trust)"), step, peers, "reference")


def judge(ranks: list[dict], spec: dict[str, Any], references: list[dict] | None = None,
          trusted: bool = True) -> list[Verdict]:
    """One verdict per rank that reported a curve: ranks are {"key", "stack", "losses", "params_sha256",
    "matmul_exact"}; spec the job they all ran (bench.jobs.numerics.NumericsSpec.key()); trusted: the
    references are the user's (a mismatch FAILs), not the shipped ones (bench.validate.numerics)."""
    groups: dict[tuple, list[dict]] = {}
    for r in ranks:
        groups.setdefault(stack_key(r["stack"]), []).append(r)
    out: list[Verdict] = []
    for members in groups.values():
        ref = find_reference(references or [], members[0]["stack"], spec)
        group = _Group.of(members)
        for i, m in enumerate(members):
            v = _peers(i, group)
            if ref is not None:
                v = _against(m, ref, v, trusted)
            exact = m.get("matmul_exact") or {}
            if exact.get("wrong") or exact.get("rerun_equal") is False:
                v = Verdict(m["key"], "FAIL", f"exact matmul ({exact.get('n')}x{exact.get('n')}, integer entries): "
                            f"{exact.get('wrong')} wrong row/column sum(s), same product twice "
                            f"{'equal' if exact.get('rerun_equal') else 'different'}; " + v.reason,
                            v.first_step, v.compared_with, v.judged_by)
            out.append(v)
    return out
