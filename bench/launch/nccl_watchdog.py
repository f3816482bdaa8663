"""What torch's NCCL watchdog wrote in each rank's log before it took the rank down, and the rank it points at.

    said = read(run_dir, ranks)                    # {rank: Said} from logs/rank<R>.log; {} on gloo runs
    v = verdict(said, ranks, flight)               # None without a watchdog line; else who waited where, who not

Why. On NCCL a collective that times out is never reported to the rank's
Python: torch's watchdog thread logs it, dumps its flight record and aborts
the process (SIGABRT), and the other ranks, signalled through the store,
dump and abort too. Every rank then dies of SIGABRT, the culprit with them,
so "the first rank killed by a signal" names rank 0 whatever happened.
What does tell them apart is what each rank's watchdog logged: the work it
timed out on (`SeqNum`, `OpType`) and, per process group, the last work it
enqueued and completed. A rank that never issued the collective the others
time out in shows a last enqueued work below it, or nothing pending at all,
or no timeout of its own.

The lines, as torch 2.3 to 2.14 print them (tests/fixtures/nccl: real logs
from public issues, SOURCES.md there):

    [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, ...) ran for 600020 milliseconds before timing out.
    [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.
    [PG 3 Rank 4] Timeout at NCCL work: 9141, last enqueued NCCL work: 9141, last completed NCCL work: 9140.
    [PG ID 1 PG GUID 1 Rank 0]  failure detected by watchdog at work sequence id: 2847 PG status: last enqueued work: 2855, last completed work: 2846
    [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from this local rank and ... Last enqueued NCCL work: 22, last completed NCCL work: 21.
    [PG ID 0 PG GUID 0(default_pg) Rank 5] Received a dump signal due to a collective timeout from  rank 2 and ... Last enqueued NCCL work: 136, last completed NCCL work: 136.
    [PG ID 0 PG GUID 0(default_pg) Rank 0] Observed flight recorder dump signal from another rank via TCPStore.

A flight-recorder dump of the rank (flight/rank<R>, written by torch on the
timeout: bench.worker.flight sets TORCH_NCCL_DUMP_ON_TIMEOUT and the file)
says the same per group, for every group: where one is read, it wins.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.launch.whereabouts import Verdict

_MAX_BYTES = 4 << 20  # the end of a rank's log: the watchdog's lines are its last words
# "[PG 1 Rank 0]", "[PG 0 (default_pg) Rank 3]", "[PG ID 0 PG GUID 0(default_pg) Rank 1]": a group is known across
# ranks by its GUID (its name), where the line gives one; the ID is this rank's count of its groups.
_PG = r"\[PG (?:ID )?(?P<id>\d+)(?: PG GUID (?P<guid>\d+))?(?:\s*\((?P<desc>[^)]*)\))? Rank \d+\]"
_CAUGHT = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
                     r"OpType=(?P<op>\w+)(?:.*?ran for (?P<ms>\d+) milliseconds)?")
_AT_WORK = re.compile(_PG + r"\s+(?:Exception \(either an error or timeout\) detected by watchdog at work|Timeout at "
                      r"NCCL work): (?P<seq>\d+), last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: "
                      r"(?P<done>-?\d+)")
_FAILURE = re.compile(_PG + r"\s+failure detected by watchdog at work sequence id: (?P<seq>\d+) PG status: last "
                      r"enqueued work: (?P<enq>-?\d+), last completed work: (?P<done>-?\d+)")
_SIGNAL = re.compile(_PG + r"\s+Received a dump signal due to a collective timeout from\s+(?:(?P<self>this local rank)|"
                     r"rank (?P<src>\d+)).*?Last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: "
                     r"(?P<done>-?\d+)")
_OBSERVED = "Observed flight recorder dump signal from another rank"
# Said only by a rank whose own watchdog caught the failure (the group's watchdog thread, after its own timeout).
_OWN = ("First PG on this rank to signal dumping", "flight recorder dumps to finish",
        "Some NCCL operations have failed or timed out")
_DOWN = ("we are taking the entire process down", "Process group watchdog thread terminated with exception",
         "Terminating the process after attempting to dump debug info", "Heartbeat monitor timed out")
_DUMPING = ("preparing to dump debug info", "Finished flight recorder successfully")
_OPS = {"ALLREDUCE": "all_reduce", "BROADCAST": "broadcast", "_ALLGATHER_BASE": "all_gather",
        "ALLGATHER": "all_gather", "_REDUCE_SCATTER_BASE": "reduce_scatter", "REDUCE_SCATTER": "reduce_scatter",
        "REDUCE": "reduce", "ALLTOALL_BASE": "all_to_all", "ALLTOALL": "all_to_all", "SEND": "send", "RECV": "recv",
        "BARRIER": "barrier", "COALESCED": "coalesced"}


@dataclass
class Said:
    """What one rank's log says of NCCL's watchdog."""

    rank: int
    failed: list[dict[str, Any]] = field(default_factory=list)   # its own timeouts: {"pg", "seq", "op", "ran_s"}
    status: dict[str, dict[str, Any]] = field(default_factory=dict)  # pg -> {"enqueued", "completed", "desc"}
    signalled_by: int | None = None   # the rank whose timeout made it dump (not itself); -1: one not named
    own: bool = False                 # its own watchdog caught a failure (the lines say so, if not always which)
    took_down: bool = False           # the watchdog said it takes the process down


def parse(lines: list[str], rank: int) -> Said | None:
    """One rank's lines -> what its watchdog said (None when it said nothing)."""
    s, seen, ops = Said(rank), False, {}
    for line in lines:
        if (m := _CAUGHT.search(line)) is not None:
            ops[int(m["seq"])] = (_OPS.get(m["op"], m["op"].lower()), int(m["ms"]) / 1e3 if m["ms"] else None)
            s.own = seen = True
        for pattern in (_AT_WORK, _FAILURE):
            if (m := pattern.search(line)) is not None:
                _status(s, m)
                if not any(f["pg"] == _pg(m) and f["seq"] == int(m["seq"]) for f in s.failed):
                    s.failed.append({"pg": _pg(m), "seq": int(m["seq"])})
                s.own = seen = True
        if (m := _SIGNAL.search(line)) is not None:
            _status(s, m)
            if m["self"]:
                s.own = True
                # Its default group's counts: a work pending there is the one that timed out (else it was another
                # group's, which the line does not name).
                if int(m["enq"]) > int(m["done"]) and not any(f["pg"] == _pg(m) for f in s.failed):
                    s.failed.append({"pg": _pg(m), "seq": int(m["done"]) + 1})
            else:
                s.signalled_by = int(m["src"])
            seen = True
        if _OBSERVED in line and s.signalled_by is None:
            s.signalled_by, seen = -1, True
        if any(o in line for o in _OWN):
            s.own = seen = True
        if any(d in line for d in _DOWN):
            s.took_down = seen = True
        if any(d in line for d in _DUMPING):
            seen = True
    for seq, (op, ran_s) in ops.items():  # a timeout line's op and time, matched to its group by the number
        f = next((f for f in s.failed if f["seq"] == seq), None)
        if f is None:
            s.failed.append({"pg": None, "seq": seq, "op": op, "ran_s": ran_s})
        else:
            f.update(op=op, ran_s=ran_s)
    return s if seen else None


def _pg(m: re.Match) -> str:
    return m["guid"] if m["guid"] is not None else m["id"]


def _status(s: Said, m: re.Match) -> None:
    s.status[_pg(m)] = {"enqueued": int(m["enq"]), "completed": int(m["done"]),
                         "desc": m["desc"] or s.status.get(_pg(m), {}).get("desc")}


def read(run_dir: str, ranks: list[int]) -> dict[int, Said]:
    """Every rank's Said from the end of its log (logs/rank<R>.log); ranks whose watchdog said nothing left out."""
    out = {}
    for r in ranks:
        try:
            with open(os.path.join(run_dir, "logs", f"rank{r}.log"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - _MAX_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        said = parse(text.splitlines(), r)
        if said is not None:
            out[r] = said
    return out


def _with_dumps(said: dict[int, Said], flight: dict[str, Any] | None) -> None:
    """A rank's flight-recorder dump (bench.launch.flight_dumps' view) is its status for every group: it wins."""
    for r, view in ((flight or {}).get("ranks") or {}).items():
        groups = view.get("groups") or {}
        if groups:
            s = said.setdefault(int(r), Said(int(r)))
            for pg, g in groups.items():
                s.status[str(pg)] = {"enqueued": g.get("last_enqueued"), "completed": g.get("last_completed"),
                                     "desc": g.get("desc") if g.get("desc") not in (None, "undefined") else None}


def verdict(said: dict[int, Said], ranks: list[tuple[int, str, int]], flight: dict[str, Any] | None = None
            ) -> Verdict | None:
    """Who timed out in which collective, and the ranks that were not in it; None when no watchdog line exists."""
    if not said:
        return None
    said = dict(said)
    _with_dumps(said, flight)
    hosts = {r: h for r, h, _ in ranks}
    failed = Counter((f["pg"], f["seq"]) for s in said.values() for f in s.failed if f["pg"] is not None)
    if not failed:
        failed = Counter((None, f["seq"]) for s in said.values() for f in s.failed)
    waited = None
    if failed:
        (pg, seq), n = max(failed.items(), key=lambda kv: (kv[1], -kv[0][1]))
        op = next((f.get("op") for s in said.values() for f in s.failed if f["seq"] == seq and f.get("op")), None)
        desc = next((s.status[pg]["desc"] for s in said.values() if pg in s.status and s.status[pg]["desc"]), None)
        waited = {"pg": pg, "desc": desc, "seq": seq, "op": op or "a collective", "ranks": n}
    sources = {s.signalled_by for s in said.values() if s.signalled_by not in (None, -1)}
    at = [_entry(r, hosts.get(r), said.get(r), waited, sources) for r in sorted(hosts)]
    odd = [e for tier in _TIERS for e in at if e["odd"] == tier]
    for e in at:
        e["odd"] = bool(e["odd"])
    return Verdict(at, odd, waited, None, _line(odd, waited, at), flight)


# How an odd rank is known, surest first: its own counts in the group the others timed out in; no word at all (a
# live rank logs the others' dump signal: a silent one was wedged or gone); nothing pending in the groups its log
# reports (not necessarily that one); it dumped when told to, without counts.
_TIERS = ("strong", "silent", "idle", "weak")


def _entry(rank: int, host: str | None, s: Said | None, waited: dict | None, sources: set[int]) -> dict[str, Any]:
    """One rank's place: an echo (it waited in the collective and was taken down with the others), or odd, with
    how it is known (_TIERS)."""
    e: dict[str, Any] = {"rank": rank, "host": host, "step": None, "collective": None,
                         "source": "NCCL watchdog (log)" if s else None, "odd": None}
    if s is not None and s.status:
        e["nccl_status"] = s.status
    echo = "NCCL's watchdog took it down (an echo of the hang)"
    failed = s.failed if s is not None else []
    mine = next((f for f in failed if waited and f["seq"] == waited["seq"] and f["pg"] in (waited["pg"], None)), None)
    if mine is not None:
        e.update(at="waiting", collective={"op": waited["op"], "seq": waited["seq"], "group": waited["pg"]},
                 waited_s=mine.get("ran_s"), ended=echo)
        return e
    if failed:
        f = failed[0]
        op = f.get("op", "a collective")
        e.update(at="waiting", collective={"op": op, "seq": f["seq"], "group": f["pg"]}, odd="strong",
                 why=f"it timed out in {op} #{f['seq']}" + (f" of PG {f['pg']}" if f["pg"] else "")
                 + ", not in the collective the others timed out in")
        return e
    if (s is not None and s.own) or rank in sources:
        e.update(at="waiting", ended=echo, why="it timed out too (its log does not say in which collective)")
        return e
    st = s.status.get(waited["pg"]) if s is not None and waited is not None and waited["pg"] is not None else None
    if st is not None and st["enqueued"] is not None and st["enqueued"] < waited["seq"]:
        e.update(at="behind", odd="strong", why=f"its last enqueued work of PG {waited['pg']} is #{st['enqueued']}: "
                                                f"it never issued #{waited['seq']}")
    elif st is not None and st["completed"] is not None and st["completed"] >= waited["seq"]:
        e.update(at="ahead", odd="strong", why=f"it completed #{waited['seq']} of PG {waited['pg']} (its last "
                                               f"completed: #{st['completed']})")
    elif st is not None:
        e.update(at="waiting", collective={"op": waited["op"], "seq": waited["seq"], "group": waited["pg"]},
                 why="it had issued it too; its own watchdog had not fired yet")
    elif s is not None and s.status and all(v["enqueued"] == v["completed"] for v in s.status.values()):
        pgs = ", ".join(f"PG {pg} #{v['enqueued']}" for pg, v in s.status.items())
        e.update(at="idle", odd="idle", why="it had no collective pending when "
                 + (f"rank {next(iter(sorted(sources)))}" if sources else "the others") + f" timed out (last enqueued "
                 f"= last completed: {pgs})")
    elif s is not None:
        by = f"rank {s.signalled_by}" if s.signalled_by not in (None, -1) else "another rank"
        e.update(at="signalled", odd="weak", why=f"no timeout of its own in its log: it dumped when {by} timed out")
    else:
        e.update(at="no word", odd="silent", why="its log holds no word of NCCL's watchdog: it was not waiting in a "
                                                 "collective when the others timed out")
    return e


def _what(waited: dict) -> str:
    group = f"PG {waited['pg']}" + (f" ({waited['desc']})" if waited.get("desc") else "") if waited["pg"] else None
    op = "collective" if waited["op"] == "a collective" else waited["op"]
    return f"{op} #{waited['seq']}" + (f" of {group}" if group else "")


def _line(odd: list[dict], waited: dict | None, at: list[dict]) -> str:
    head = "NCCL's watchdog took the ranks down"
    named = [f"rank {e['rank']}" + (f" on {e['host']}" if e.get("host") else "") + f": {e['why']}" for e in odd[:3]]
    if len(odd) > 3:
        named.append(f"and {len(odd) - 3} more rank(s)")
    timed = [e["rank"] for e in at if e.get("ended")]
    who = "every rank" if len(timed) == len(at) else f"rank{'s' if len(timed) > 1 else ''} " + \
        ", ".join(map(str, timed[:8])) + (" ..." if len(timed) > 8 else "")
    if waited is None:
        tail = f"{who} timed out (in which collective, no log line says)" if timed else \
            "no log line says which collective timed out"
    else:
        tail = f"{who} timed out in {_what(waited)}"
        if not odd:
            tail += ": no rank stands out (a link between them, a GPU, or something outside this run)"
    return f"{head}: " + "; ".join([*named, tail])
