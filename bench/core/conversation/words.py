"""What a rank may say about itself (bench.core.conversation): a schema for its progress, its failure report and its
stack answers, each rebuilt from the fields bench reads, with the rank and host of its connection's hello.

    clean = progress(msg["progress"])                     # Bad: not a progress a rank sends
    report, garbled = report(raw, rank=2, host="node2", status="failed")   # always a report about rank 2
    answer, garbled = answer(raw, rank=2, host="node2")   # the same for a stack answer

Nothing that comes off the network is kept as it came: every kept value is
rebuilt here from known fields, each checked for its type and range, every
string cut to its size, every list to its length. So what bench keeps per
rank is bounded by the schema, not the line (KEPT_MAX below), no kept value
nests deeper than three levels (json.dumps with indent recurses once per
level: a 988-deep progress ended bench's watch), and no consumer
(bench.launch.diagnose, whereabouts, the progress bar) meets a missing
field or a string where it reads a number. A report or an answer whose own
rank or host is not its connection's is garbled: it is kept as rank R's
word that it sent one ("rank 2 sent a report that is not about itself"),
its text dropped, never as another rank's.
"""

from __future__ import annotations

from typing import Any

from bench.core.conversation.lines import Bad, finite

MAX_ERROR = 4096       # a failed rank's error line (its first line; torch's are < 1 KB; phone.fit cuts at 4 KiB)
MAX_IN_FLIGHT = 64     # collectives a rank has in flight at once (a few: one per group)
MAX_THREADS = 32       # a stack answer's threads (4 in a real rank: main, the phone's reader and answer, gloo's)
MAX_FRAMES = 60        # per thread (bench.worker.stall keeps the 60 innermost)
MAX_FIELD = 400        # a frame's file or function, a thread's name, a flight recorder's reason or path
# The most one rank's kept words can take as JSON: a progress (< 1 KB), a report (< 8 KB), and the latest answer to
# each of bench's stack requests (at most 2 in a launch; 9.9 KB each in real runs, MAX_THREADS x MAX_FRAMES frames
# of at most 4 x MAX_FIELD characters at worst). A rank past it is dropped (hub.py).
KEPT_MAX = 512 << 10
_BIG = 2 ** 53


def _int(v: Any, what: str, lo: int = -_BIG, hi: int = _BIG, none: bool = True) -> int | None:
    if v is None and none:
        return None
    if type(v) is not int or not lo <= v <= hi:
        raise Bad(f"{what} {v!r:.40} is not an integer in {lo}..{hi}")
    return v


def _num(v: Any, what: str, none: bool = True) -> float | None:
    return None if v is None and none else finite(v, what)


def _str(v: Any, what: str, most: int, none: bool = True) -> str | None:
    if v is None and none:
        return None
    if not isinstance(v, str):
        raise Bad(f"{what} is not a string")
    return v[:most]


def _dict(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Bad(f"{what} is not an object")
    return v


def _list(v: Any, what: str, most: int) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise Bad(f"{what} is not a list")
    return v[:most]


def progress(raw: Any) -> dict[str, Any]:
    """A rank's progress (bench.worker: step, total, loss, time, and epoch/epochs/elapsed_s/size/phase where it
    has them), rebuilt; Bad where it is not one."""
    v = _dict(raw, "progress")
    out: dict[str, Any] = {"step": _int(v.get("step"), "progress: step", 0, _BIG, none=False),
                           "total": _int(v.get("total", 0), "progress: total", 0, _BIG, none=False),
                           "loss": _num(v.get("loss"), "progress: loss"),
                           "time": _num(v.get("time"), "progress: time", none=False)}
    for key in ("epoch", "epochs", "size"):
        if key in v:
            out[key] = _int(v[key], f"progress: {key}", 0, _BIG)
    if "elapsed_s" in v:
        out["elapsed_s"] = _num(v["elapsed_s"], "progress: elapsed_s")
    if "phase" in v:
        out["phase"] = _str(v["phase"], "progress: phase", 40)
    return out


def _collective(v: Any, what: str) -> dict[str, Any]:
    c = _dict(v, what)
    out = {"seq": _int(c.get("seq"), f"{what}: seq", -1, _BIG, none=False),
           "op": _str(c.get("op"), f"{what}: op", 64, none=False), "step": _int(c.get("step"), f"{what}: step")}
    for key in ("for_s", "after_s"):
        if key in c:
            out[key] = _num(c[key], f"{what}: {key}")
    if "error" in c:
        out["error"] = _str(c["error"], f"{what}: error", 300)
    return out


def position(raw: Any, what: str = "at") -> dict[str, Any]:
    """Where a rank was (bench.worker.position's snapshot: step, seq, in_flight, failed), rebuilt."""
    v = _dict(raw, what)
    failed = v.get("failed")
    return {"step": _int(v.get("step"), f"{what}: step"), "seq": _int(v.get("seq"), f"{what}: seq"),
            "in_flight": [_collective(c, f"{what}: in_flight") for c in
                          _list(v.get("in_flight"), f"{what}: in_flight", MAX_IN_FLIGHT)],
            "failed": None if failed is None else _collective(failed, f"{what}: failed")}


def _about(raw: dict[str, Any], rank: int, host: str) -> str | None:
    """Why raw is not about this rank (its own rank or host is another's), or None."""
    said_rank, said_host = raw.get("rank", rank), raw.get("host", host)
    if said_rank != rank or type(said_rank) is not int or said_host != host:
        return (f"is not about itself (it named rank {str(said_rank)[:20]!r} on {str(said_host)[:80]!r}; its "
                f"connection's hello is rank {rank} on {host!r})")
    return None


def report(raw: Any, rank: int, host: str, status: str) -> tuple[dict[str, Any] | None, str | None]:
    """A done's report rebuilt as rank's own ({"rank", "host", "status", "error", "at"}), and why it is garbled
    (None when it is not): a garbled one says so in its error, with none of its text where it spoke of another."""
    if raw is None:
        return None, None
    out: dict[str, Any] = {"rank": rank, "host": host, "status": status}
    try:
        v = _dict(raw, "report")
        if (why := _about(v, rank, host)) is not None:
            raise Bad(why)
        if v.get("status", status) != status:
            raise Bad(f"says status {str(v.get('status'))[:20]!r} in a done {status!r}")
        out["error"] = _str(v.get("error"), "its error", MAX_ERROR) or ""
        if v.get("at") is not None:
            out["at"] = position(v["at"])
        if isinstance(v.get("cut"), str):  # the phone cut it to fit MAX_LINE (phone.fit) and said so
            out["cut"] = v["cut"][:200]
        return out, None
    except Bad as e:
        garbled = f"rank {rank} on {host} sent a report that {e}" if str(e).startswith("is not about") else \
            f"rank {rank} on {host} sent a garbled report ({e})"
        return {**out, "error": garbled, "garbled": True}, garbled


def answer(raw: Any, rank: int, host: str, request: str) -> tuple[dict[str, Any], str | None]:
    """A stack answer rebuilt as rank's own (bench.worker.stall: position, threads, flight_recorder), and why it is
    garbled (then it is one with no thread, which says so: bench.launch.whereabouts names the rank)."""
    out: dict[str, Any] = {"request": request, "rank": rank, "host": host}
    try:
        v = _dict(raw, "answer")
        if (why := _about(v, rank, host)) is not None:
            raise Bad(why)
        out["pid"] = _int(v.get("pid"), "pid", 0, 2 ** 31)
        out["time"] = _num(v.get("time"), "time")
        out["position"] = position(v.get("position") or {}, "position")
        out["threads"] = [_thread(t) for t in _list(v.get("threads"), "threads", MAX_THREADS)]
        fr = _dict(v.get("flight_recorder") or {}, "flight_recorder")
        fr = _dict(v.get("flight_recorder") or {}, "flight_recorder")
        out["flight_recorder"] = {str(k)[:40]: x[:MAX_FIELD] if isinstance(x, str) else x
                                  for k, x in list(fr.items())[:8] if _scalar(x)}
        return out, None
    except Bad as e:
        garbled = f"rank {rank} on {host} sent a stack answer that {e}" if str(e).startswith("is not about") else \
            f"rank {rank} on {host} sent a garbled stack answer ({e})"
        return {**out, "position": {"step": None, "seq": None, "in_flight": [], "failed": None}, "threads": [],
                "flight_recorder": {"path": None, "reason": "garbled"}, "garbled": garbled}, garbled


def _scalar(x: Any) -> bool:
    return x is None or isinstance(x, (str, bool)) or (type(x) is int and abs(x) < _BIG)


def _thread(raw: Any) -> dict[str, Any]:
    t = _dict(raw, "a thread")
    frames = []
    for fr in _list(t.get("frames"), "frames", MAX_FRAMES):
        f = _dict(fr, "a frame")
        frames.append({"file": _str(f.get("file"), "a frame's file", MAX_FIELD) or "",
                       "line": _int(f.get("line"), "a frame's line", 0, _BIG),
                       "function": _str(f.get("function"), "a frame's function", MAX_FIELD) or "",
                       "code": _str(f.get("code"), "a frame's code", MAX_FIELD) or ""})
    return {"thread": _str(t.get("thread"), "a thread's name", MAX_FIELD) or "", "main": t.get("main") is True,
            "daemon": t.get("daemon") is True, "frames": frames}
