"""Where each rank of a hung run was, and which ones stand out: the record's `ranks_at` and its one line.

    v = verdict(ranks, stacks, reports, cleanup, flight, resources, device)
    v.ranks_at     # per rank: step, collective (op, number) or the innermost frame of bench's code, and how known
    v.odd          # the ranks not in the collective the others waited in (or behind it, or silent)
    v.reason       # "hung at step 213: rank 5 on node-3 was in data loading (bench/worker/data.py:141); 15 ranks
                   #  waited in all_reduce #1705"

What each rank's entry comes from, best first:
  - its answer to bench's stack request (bench.worker.stall): its position
    (the comm counter numbers every collective; those in flight) and its
    main thread's stack; on GPUs the flight recorder's view of its NCCL
    stream (a collective the host issued long ago and the device never
    finished) replaces the host's "outside any collective";
  - its own failure report, for a rank that ended before bench asked (its
    collective timed out): the collective that failed;
  - nothing: it did not answer. Then its process state (stopped, blocked in
    the kernel) and its host's reachability say why.

The collective the others waited in is the one most ranks were in (op and
number); every rank not in it is odd: outside any collective, in another
one, behind at an earlier number, or silent. When every rank waited in the
same collective, none stands out by position: a host that stopped
answering, or the flight recorder's rank that never issued it, is named.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# The innermost frame of bench's own code says what a rank outside any collective was doing.
_FILES = {"bench/worker/data.py": "data loading", "bench/worker/model_states.py": "measuring model states",
          "bench/worker/dist.py": "process-group setup", "bench/worker/barrier.py": "the start barrier",
          "bench/worker/engines.py": "building the engine"}
# Lines of the training loop (bench/worker/loop.py), by the code they hold (a unit test keeps them there).
LOOP_LINES = {"next(stream)": "data loading", "engine(x)": "the forward pass", "engine.backward(": "the backward pass",
              "engine.step()": "the optimizer step", ".tolist()": "fetching the step's loss",
              "after_backward()": "measuring model states"}
_PLUMBING = ("bench/worker/comm_counter.py", "bench/worker/position.py", "bench/worker/stall.py",
             "bench/core/conversation/phone.py", "bench/worker/flight.py")


@dataclass
class Verdict:
    ranks_at: list[dict[str, Any]]
    odd: list[dict[str, Any]]
    waited: dict[str, Any] | None        # {"op", "seq", "ranks"}: the collective the others waited in
    step: int | None
    reason: str
    flight: dict[str, Any] | None = field(default=None)


def innermost(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The main thread's innermost frame in bench's own code (not the counter or the answering plumbing)."""
    threads = answer.get("threads") or []
    main = next((t for t in threads if t.get("main")), threads[0] if threads else None)
    for fr in reversed((main or {}).get("frames") or []):
        if str(fr.get("file", "")).startswith("bench/") and fr.get("file") not in _PLUMBING:
            return fr
    return None


def doing(frame: dict[str, Any] | None) -> str | None:
    """What a frame of bench's code was doing, in words (None: say only where)."""
    if frame is None:
        return None
    if frame.get("file") == "bench/worker/loop.py":
        if frame.get("function") == "evaluate":
            return "evaluation"
        code = str(frame.get("code", ""))
        return next((what for text, what in LOOP_LINES.items() if text in code), None)
    return _FILES.get(str(frame.get("file")))


def plan_host(rank: int, resources: dict[str, list[int]]) -> str | None:
    """The plan's host of a global rank: ranks fill the hosts in hostfile order, slot by slot."""
    first = 0
    for host, slots in resources.items():
        if rank < first + len(slots):
            return host
        first += len(slots)
    return None


def _flight_view(flight: dict[str, Any] | None, rank: int) -> dict[str, Any] | None:
    """The flight recorder's word on one rank: its group with a collective pending, else its default group."""
    groups = (((flight or {}).get("ranks") or {}).get(str(rank)) or {}).get("groups") or {}
    if not groups:
        return None
    name, g = next(((n, g) for n, g in groups.items() if g.get("pending")), next(iter(groups.items())))
    pending = (g.get("pending") or [None])[0]
    return {"group": g.get("desc") or name, "last_enqueued": g.get("last_enqueued"),
            "last_completed": g.get("last_completed"), "pending": pending}


def _behind_in_flight(flight: dict[str, Any] | None) -> dict[int, str]:
    """Ranks whose recorder shows fewer collectives issued in a group than the group's others: {rank: why}."""
    per_group: dict[str, dict[int, int]] = {}
    for r, view in ((flight or {}).get("ranks") or {}).items():
        for name, g in (view.get("groups") or {}).items():
            desc = g.get("desc")
            label = f"{name} ({desc})" if desc and desc not in (name, "undefined") else name
            per_group.setdefault(label, {})[int(r)] = int(g.get("last_enqueued", -1))
    behind: dict[int, str] = {}
    for group, issued in per_group.items():
        top = max(issued.values(), default=-1)
        for r, n in issued.items():
            if n < top and r not in behind:
                behind[r] = f"its flight recorder shows collective #{n} of group {group} as its last, the others' #{top}"
    for m in (((flight or {}).get("analyzer") or {}).get("mismatches") or []):
        for r in m.get("missing_ranks") or []:
            behind.setdefault(int(r), f"torch's analyzer: it did not join {m.get('op')} #{m.get('seq')} of group "
                                      f"{m.get('group')}")
    return behind


def entry(rank: int, host: str, pid: int, answer: dict[str, Any] | None, report: dict[str, Any] | None,
          state: str | None, unreachable: str | None, flight: dict[str, Any] | None, device: str) -> dict[str, Any]:
    """One rank's place in ranks_at."""
    e: dict[str, Any] = {"rank": rank, "host": host, "pid": pid, "step": None, "collective": None}
    fv = _flight_view(flight, rank)
    if fv is not None:
        e["flight_recorder"] = fv
    if answer is not None and answer.get("garbled"):  # its own word, and nothing of it read as a place
        e.update(at="garbled", source="stack", garbled=answer["garbled"])
    elif answer is not None:
        pos = answer.get("position") or {}
        e.update(step=pos.get("step"), last_seq=pos.get("seq"), source="stack")
        frame = innermost(answer)
        if frame is not None:
            e["frame"] = f"{frame['file']}:{frame['line']}"
            e["code"] = frame.get("code", "")
        flying = pos.get("in_flight") or []
        if flying:
            c = flying[0]
            e.update(at="waiting", collective={"op": c["op"], "seq": c["seq"]}, waited_s=c.get("for_s"))
        elif device == "cuda" and fv is not None and fv.get("pending"):
            # The host returned from the call; the device never finished it (NCCL's stream).
            p = fv["pending"]
            e.update(at="waiting", collective={"op": p["op"], "seq": p["seq"], "group": fv["group"]},
                     source="flight recorder", device_state=p.get("state"))
        else:
            e.update(at="outside", doing=doing(frame))
    elif report is not None:
        at = report.get("at") or {}
        failed = at.get("failed")
        e.update(step=at.get("step"), last_seq=at.get("seq"), source="report", error=report.get("error"))
        flying = at.get("in_flight") or []
        if failed:
            e.update(at="waiting", collective={"op": failed["op"], "seq": failed["seq"]},
                     waited_s=failed.get("after_s"), ended="its collective failed: " + str(failed.get("error")))
        elif flying:  # it ended while in one (orphaned: its link to bench gone): where it was
            e.update(at="waiting", collective={"op": flying[0]["op"], "seq": flying[0]["seq"]},
                     waited_s=flying[0].get("for_s"), ended=str(report.get("error")))
        else:
            e.update(at="ended")
    else:
        e.update(at="no answer", source=None)
        if state:
            e["process_state"] = state
    if unreachable:
        e["host_unreachable"] = unreachable
    return e


def describe(e: dict[str, Any], waited: dict[str, Any] | None) -> str:
    """One odd rank in words, for the failure line."""
    who = f"rank {e['rank']} on {e['host']}"
    if e["at"] == "outside":
        where = e.get("frame") or "no frame of bench's code"
        return f"{who} was in {e['doing']} ({where})" if e.get("doing") else \
            f"{who} was outside any collective ({where}{': ' + e['code'] if e.get('code') else ''})"
    if e["at"] == "waiting":
        c = e["collective"]
        behind = waited is not None and c["seq"] < waited["seq"]
        return f"{who} was in {c['op']} #{c['seq']}" + (f", behind the others (#{waited['seq']})" if behind else "")
    if e["at"] == "ended":
        return f"{who} had ended: {e.get('error') or 'with no error'}"
    if e["at"] == "garbled":
        return str(e["garbled"])
    if e.get("host_unreachable"):
        return f"{who} did not answer: its host stopped answering ({e['host_unreachable']})"
    state = e.get("process_state")  # "T (stopped)": the letter of /proc/PID/stat, in words
    letter, _, words = (state or "").partition(" ")
    if letter == "T":
        return f"{who} did not answer: its process was stopped (state T: SIGSTOP, or a debugger)"
    if state:
        return f"{who} did not answer: its process was {words.strip('()') or 'in state'} (state {letter})"
    if e.get("behind"):
        return f"{who} did not answer; {e['behind']}"
    return f"{who} did not answer (its process was gone or could not write to the run directory)"


def verdict(ranks: list[tuple[int, str, int]], answers: dict[int, dict[str, Any]], reports: dict[int, dict[str, Any]],
            cleanup: dict[str, Any], flight: dict[str, Any] | None, resources: dict[str, list[int]],
            device: str, local_states: dict[int, str] | None = None, aborted: dict[int, str] | None = None) -> Verdict:
    """ranks: (rank, hostname, pid) as recorded; answers/reports by rank; cleanup: bench.launch.cleanup's summary;
    aborted: ranks that NCCL's watchdog took down after their own collective timed out (bench.launch.nccl_watchdog),
    which could not answer: echoes of the hang, not its cause."""
    unreachable = cleanup.get("unreachable") or {}
    states = cleanup.get("states") or {}
    behind = _behind_in_flight(flight)
    at: list[dict[str, Any]] = []
    for rank, host, pid in ranks:
        ph = plan_host(rank, resources)
        state = (local_states or {}).get(rank) or (states.get(ph or "", {}) or {}).get(str(pid)) \
            or (states.get(host, {}) or {}).get(str(pid))
        e = entry(rank, host, pid, answers.get(rank), reports.get(rank), state,
                  unreachable.get(ph or "") or unreachable.get(host), flight, device)
        if rank in behind:
            e["behind"] = behind[rank]
        if e["at"] == "no answer" and rank in (aborted or {}):
            e.update(at="aborted", source="NCCL watchdog (log)", ended=aborted[rank])
        at.append(e)
    counts = Counter((e["collective"]["op"], e["collective"]["seq"]) for e in at if e["at"] == "waiting")
    waited = None
    if counts:
        (op, seq), n = max(counts.items(), key=lambda kv: (kv[1], kv[0][1], kv[0][0]))
        waited = {"op": op, "seq": seq, "ranks": n}
    for e in at:
        e["odd"] = e["at"] != "aborted" and (waited is None or e["at"] != "waiting" or
                                             (e["collective"]["op"], e["collective"]["seq"]) != (waited["op"],
                                                                                                 waited["seq"]))
    # A host that stopped answering explains its peers (a rank one message ahead of the others, say): first. Then
    # a process seen stopped or blocked that did not answer: a rank that answered from inside a collective is
    # waiting on someone, even one behind the others (in a ring all-reduce a rank can pass #60 while its neighbour
    # still waits for the stopped rank's last chunk of #59: a CI run named that neighbour, not the stopped rank).
    # Ranks of one kind keep their rank order (a stable sort).
    odd = sorted((e for e in at if e["odd"] or e.get("host_unreachable")),
                 key=lambda e: 0 if e.get("host_unreachable") else 1 if e["at"] == "no answer" and
                 e.get("process_state") else 2)
    if not odd:
        # Every rank in the same collective: the one the flight recorder shows behind, if any.
        odd = [e for e in at if e.get("behind")]
    for e in odd:
        e["odd"] = True
    steps = [e["step"] for e in at if e.get("step") and (waited is None or not e["odd"])] or \
            [e["step"] for e in at if e.get("step")]
    step = max(steps) if steps else None
    return Verdict(at, odd, waited, step, _line(step, odd, waited, len(at)), flight)


def _line(step: int | None, odd: list[dict[str, Any]], waited: dict[str, Any] | None, world: int) -> str:
    head = f"hung at step {step}" if step else "hung before the first step"
    named = [_named(e, waited) for e in odd[:3]]
    if len(odd) > 3:
        named.append(f"and {len(odd) - 3} more rank(s) not in that collective")
    if waited is not None:
        n = waited["ranks"]
        everyone = n == world
        tail = (f"every rank ({n}) waited in {waited['op']} #{waited['seq']}" if everyone else
                f"{n} rank{'s' if n > 1 else ''} waited in {waited['op']} #{waited['seq']}")
        if everyone and not odd:
            tail += ": no rank stands out (a link between them, or something outside this run)"
    else:
        tail = "no rank was in a collective"
    return f"{head}: " + "; ".join([*named, tail])


def _named(e: dict[str, Any], waited: dict[str, Any] | None) -> str:
    who = f"rank {e['rank']} on {e['host']}"
    same = e["at"] == "waiting" and waited is not None and \
        (e["collective"]["op"], e["collective"]["seq"]) == (waited["op"], waited["seq"])
    if e.get("host_unreachable"):
        head = f"{who}: its host stopped answering ({e['host_unreachable']})"
        if same:
            return f"{head}, while waiting in {waited['op']} #{waited['seq']} too"
        if e["at"] in ("waiting", "outside"):
            return f"{head}; it {describe(e, waited)[len(who) + 1:]}"
        return head
    if same:  # named only for what the flight recorder says of it: it waited like the others
        return f"{who}: {e.get('behind')}, while waiting in {waited['op']} #{waited['seq']} too"
    return describe(e, waited)
