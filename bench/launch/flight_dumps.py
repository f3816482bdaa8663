"""The ranks' flight-recorder dumps of a hung run (flight/rank<R>, bench.worker.flight): each rank's view, and
torch's own analyzer of them on GPUs.

    view = read(run_dir)                          # {"ranks": {"0": {"groups": {...}}, ...}}: torch-free, in-process
    proc = start_analyzer(run_dir, device)        # NCCL's dumps: torch's analyzer, in a process of its own
    view["analyzer"] = finish_analyzer(proc) or NOT_RUN   # its verdict: collectives not every rank joined

A dump is torch's pickle of plain dicts, lists, strings and numbers; it is
read here with an unpickler that refuses every class, so a file in the run
directory can build nothing else. Per process group a rank's dump says the
last collective it enqueued, started and completed (`pg_status`), and its
entries what each was (`profiling_name`, `state`, `collective_seq_id`, the
Python frames that issued it). torch's analyzer (torch.distributed.
flight_recorder) needs torch, a few seconds of a busy node, and dumps whose
`pg_config` names their groups, which NCCL's do and gloo's (torch 2.14.1)
do not: it runs for GPU runs only.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import subprocess
import sys
from typing import Any

DIR = "flight"
PREFIX = "rank"
ALONE_SUFFIX = "-group-rank"
_NAME = re.compile(rf"^{PREFIX}(?P<rank>\d+)(?P<alone>{ALONE_SUFFIX}\d+)?$")
ANALYZER_TIMEOUT_S = 60.0
NOT_RUN = {"ok": None, "reason": "torch's analyzer runs on NCCL's dumps only: a gloo dump's pg_config names no group "
                                 "(torch 2.14.1), which it cannot match; the per-rank view above is read from pg_status"}
_MAX_BYTES = 64 << 20


class _PlainOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a flight-recorder dump holds no {module}.{name}")


def _op(name: str) -> str:
    return name.split(":", 1)[1] if ":" in name else name  # "nccl:all_reduce" -> "all_reduce"


def _issued_at(entry: dict[str, Any]) -> str | None:
    """The innermost frame of bench's code that issued the collective (the recorder keeps its Python frames)."""
    for fr in entry.get("frames") or []:
        path = str(fr.get("filename", "")).replace(os.sep, "/")
        if "/bench/" in path and not path.endswith("/bench/worker/comm_counter.py"):
            return f"bench/{path.rsplit('/bench/', 1)[1]}:{fr.get('line')}"
    return None


def rank_view(dump: dict[str, Any]) -> dict[str, Any]:
    """One rank's dump -> per process group: the last collective enqueued and completed, and the ones pending."""
    entries = [e for e in dump.get("entries") or [] if isinstance(e, dict)]
    groups: dict[str, Any] = {}
    for pg, status in (dump.get("pg_status") or {}).items():
        mine = [e for e in entries if str((e.get("process_group") or ("",))[0]) == str(pg)]
        desc = next((e["process_group"][1] for e in mine if len(e.get("process_group") or ()) > 1), None)
        done = int(status.get("last_completed_collective", -1))
        pending = [e for e in mine if int(e.get("collective_seq_id", 0)) > done and not e.get("is_p2p")
                   and e.get("state") != "completed"]
        groups[str(pg)] = {
            "desc": desc, "last_enqueued": int(status.get("last_enqueued_collective", -1)),
            "last_started": int(status.get("last_started_collective", -1)), "last_completed": done,
            "pending": [{"seq": int(e["collective_seq_id"]), "op": _op(str(e.get("profiling_name", "?"))),
                         "state": e.get("state"), "issued_at": _issued_at(e)} for e in pending][:4]}
    return {"version": dump.get("version"), "groups": groups}


def _dumps(run_dir: str) -> list[tuple[str, str]]:
    """(rank, path) of every dump: flight/rank<R>, and an independent rank's own flight/rank<R>-group-rank0
    (bench.worker.flight: there torch names its dump by the group's rank, 0 in every world of one), which
    yields to a rank<R> of the same rank (the dump bench asked for, the later one). By name for each rank of
    plan.json's world (a network filesystem's client may list a stale directory); listed only without a plan."""
    directory = os.path.join(run_dir, DIR)
    world = _world(run_dir)
    if world is not None:
        names = [n for r in range(world) for n in (f"{PREFIX}{r}", f"{PREFIX}{r}{ALONE_SUFFIX}0")
                 if os.path.exists(os.path.join(directory, n))]
    else:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return []
    found: dict[str, str] = {}
    for n in names:
        m = _NAME.match(n)
        if m and (m["alone"] is None or m["rank"] not in found):
            found[m["rank"]] = os.path.join(directory, n)
    return sorted(found.items(), key=lambda kv: int(kv[0]))


def _world(run_dir: str) -> int | None:
    try:
        with open(os.path.join(run_dir, "plan.json")) as f:
            return int(json.load(f)["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def holds_dumps(run_dir: str) -> bool:
    return bool(_dumps(run_dir))


def read(run_dir: str) -> dict[str, Any] | None:
    """Every rank's view from its dump; None when no rank dumped."""
    dumps = _dumps(run_dir)
    if not dumps:
        return None
    ranks: dict[str, Any] = {}
    for rank, path in dumps:
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_BYTES)
            dump = _PlainOnly(io.BytesIO(data)).load()
            ranks[rank] = rank_view(dump) if isinstance(dump, dict) else {"error": "not a flight-recorder dump"}
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, KeyError, TypeError, ValueError) as e:
            ranks[rank] = {"error": f"{type(e).__name__}: {e}"[:200]}
    return {"ranks": ranks, "analyzer": None}


def start_analyzer(run_dir: str, device: str) -> subprocess.Popen | None:
    """torch's analyzer over NCCL's dumps (python -m bench.worker.flight), started now, read after the stop."""
    dumps = _dumps(run_dir)
    # torch's analyzer reads flight/rank<R> files of one world; an independent run's worlds of one hold nothing
    # for it to match.
    if device != "cuda" or not dumps or any(ALONE_SUFFIX in os.path.basename(p) for _, p in dumps):
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "bench.worker.flight", os.path.join(run_dir, DIR)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True,
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    except OSError:
        return None


def finish_analyzer(proc: subprocess.Popen | None, timeout: float = ANALYZER_TIMEOUT_S) -> dict[str, Any] | None:
    """Its verdict ({"ok", "mismatches": [...]} or {"ok": false, "error"}); None when it did not run."""
    if proc is None:
        return None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.communicate()
        return {"ok": False, "error": f"torch's flight-recorder analyzer took over {timeout:.0f} s"}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": f"the analyzer exited {proc.returncode}: {err.strip()[-300:]}"}
