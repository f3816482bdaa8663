"""torch's flight recorder on the ranks: switched on, dumped on bench's request, and read back by torch's analyzer.

    enable(run_dir)                     # a rank, before its process group exists
    dump(run_dir, rank)                 # a rank answering bench's stack request: flight/rank<R>
    python -m bench.worker.flight DIR   # bench, after a hang on GPUs: torch's analyzer's verdict, one JSON document

Why. On GPUs a collective is a kernel on NCCL's stream: the host thread
that issued it returned long ago, so a rank's Python stack and its comm
counter say "outside any collective" while its all-reduce never finished.
torch's flight recorder keeps, per process group, a ring of the last
collectives each rank issued with their state (scheduled, started,
completed: NCCL reads CUDA events for it), and per group the last
collective enqueued, started and completed. Dumped by every rank, they say
which rank never issued collective #N of a group, or issued it and never
finished it. The recorder exists for gloo too (torch 2.14.1): on CPU runs it
is a second witness beside bench's own position (bench.worker.position).

Where the dumps go. `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` (the prefix NCCL's
own dump on a collective timeout writes to, `TORCH_NCCL_DUMP_ON_TIMEOUT`)
points into the shared run directory, and the dump bench asks for writes
the same file, flight/rank<R>, in the same format (torch's pickle): one
directory of one file per rank, which is what torch's analyzer
(torch.distributed.flight_recorder.fr_trace) reads. A user's own
`TORCH_FR_BUFFER_SIZE` / `TORCH_NCCL_TRACE_BUFFER_SIZE` (0 turns it off) wins.

Both names, for both torch builds bench ships. torch 2.7.1 (the Pascal
image) reads only `TORCH_NCCL_TRACE_BUFFER_SIZE`, default 0 (off): its
libtorch_cuda.so and libtorch_cpu.so hold no `TORCH_FR_` string (the
2.7.1+cu126 wheel, git e2d141db), and the generic name came with
pytorch/pytorch#152563 (May 2025), whose diff shows the line before it,
`getCvarInt({"TORCH_NCCL_TRACE_BUFFER_SIZE"}, 0)`. torch 2.14.1 reads
`TORCH_FR_BUFFER_SIZE` first and warns into every rank's log when the
old name is set at all ("Environment variable TORCH_NCCL_TRACE_BUFFER_SIZE
is deprecated"). So enable() sets the size under the name the rank's own
torch reads (both where the version is unknown), a user's value under
either name taken as the value, and the dump file's prefix under both of
its names (`TORCH_FR_DUMP_TEMP_FILE`, `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`;
torch 2.14.1 reads the old one without a warning).

An independent run (bench validate's per-GPU runs) gives every rank a
world of one, where torch names its own dump by the group's rank, 0 on
every rank: there the prefix carries the launcher's rank
(flight/rank<R>-group-rank0), so no rank's dump overwrites another's.

Known limit (torch 2.14.1, tried): a gloo dump's `pg_config` lists every
group under the empty name '' (gloo registers a group with the recorder
before the group is named), so torch's analyzer stops with a KeyError on it;
bench's own per-rank view (bench.launch.flight_dumps) reads `pg_status` and
the entries, which are right; bench runs torch's analyzer on NCCL's dumps only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from bench.core.provenance import release

BUFFER_ENTRIES = 2000   # collectives kept per rank: a few steps of ZeRO-3's per-layer gathers
DIR = "flight"
PREFIX = "rank"         # files flight/rank<R>: torch's analyzer takes the digits after the prefix as the rank
# The generic name first (torch 2.14.1 reads it first), NCCL's older one second (all torch 2.7.1 reads).
_SIZE_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
# torch 2.8 (pytorch/pytorch#152563) added TORCH_FR_BUFFER_SIZE; before it, TORCH_NCCL_TRACE_BUFFER_SIZE only,
# default 0 (off).
_GENERIC_SINCE = (2, 8)
ALONE_SUFFIX = "-group-rank"  # flight/rank<R>-group-rank0: an independent rank's own dump, R the launcher's rank


def enable(run_dir: str, launcher_rank: int | None = None, torch_version: str | None = None) -> None:
    """Switch the recorder on for the process groups this rank creates from now (environment, read at creation).

    launcher_rank: given in an independent run (a world of one per rank), where torch would name every rank's
    dump flight/rank0. torch_version: the torch this rank runs (default: the one imported).
    """
    known = _release(torch_version)
    # Set only the name this torch reads (the old one warns on 2.8+); both where the version is not known.
    only = _SIZE_VARS if known is None else _SIZE_VARS[1:] if known < _GENERIC_SINCE else _SIZE_VARS[:1]
    _same_value(_SIZE_VARS, str(BUFFER_ENTRIES), only=only)
    os.makedirs(os.path.join(run_dir, DIR), exist_ok=True)
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    prefix = os.path.join(run_dir, DIR, PREFIX if launcher_rank is None else f"{PREFIX}{launcher_rank}{ALONE_SUFFIX}")
    _same_value(_FILE_VARS, prefix)


def _same_value(names: tuple[str, ...], default: str, only: tuple[str, ...] | None = None) -> None:
    """Every name of `only` (default: all of `names`) that is unset, set to the value the user gave one of `names`
    (the first set), else to `default`."""
    given = next((os.environ[v] for v in names if os.environ.get(v, "").strip()), default)
    for v in names if only is None else only:
        if not os.environ.get(v, "").strip():
            os.environ[v] = given


def enabled(torch_version: str | None = None) -> bool:
    """Whether this torch records: the first of its names that is set, as torch reads them (2.7 knows one)."""
    known = _release(torch_version)
    names = _SIZE_VARS[1:] if known is not None and known < _GENERIC_SINCE else _SIZE_VARS
    value = next((os.environ[v].strip() for v in names if os.environ.get(v, "").strip()), "")
    return value not in ("", "0")


def _release(torch_version: str | None) -> tuple[int, ...] | None:
    """(major, minor) of the given torch version, else of the torch imported; None where neither is known."""
    if torch_version is None and "torch" in sys.modules:
        torch_version = getattr(sys.modules["torch"], "__version__", None)
    return release(torch_version, 2) if torch_version else None


def dump(run_dir: str, rank: int) -> dict[str, Any]:
    """Write this rank's record to flight/rank<R> (atomically); says what it wrote, or why nothing."""
    if not enabled():
        return {"path": None, "reason": "the flight recorder is off (TORCH_FR_BUFFER_SIZE / "
                                        "TORCH_NCCL_TRACE_BUFFER_SIZE = 0)"}
    if "torch" not in sys.modules:
        return {"path": None, "reason": "torch not loaded yet: no process group to record"}
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    nccl = dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl"
    # NCCL's recorder holds CUDA events (started/completed); every other backend's is the generic one.
    data = (c10d._dump_nccl_trace if nccl else c10d._dump_fr_trace)(
        includeCollectives=True, includeStackTraces=True, onlyActive=False)
    path = os.path.join(run_dir, DIR, f"{PREFIX}{rank}")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return {"path": os.path.relpath(path, run_dir), "bytes": len(data), "writer": "torch._C._distributed_c10d."
            + ("_dump_nccl_trace" if nccl else "_dump_fr_trace")}


# --- bench's side, in a process of its own (it imports torch's analyzer; bench.launch.flight_dumps runs it) ----
def _op(name: str) -> str:
    return name.split(":", 1)[1] if ":" in name else name  # "nccl:all_reduce" -> "all_reduce"


def _torch_analyzer(directory: str) -> dict[str, Any]:
    """torch's own analysis (fr_trace's read_dir + build_db): the collectives that did not match on every rank."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir

    args = JobConfig().parse_args([directory, "--prefix", PREFIX, "--allow-incomplete-ranks"])
    details: dict[str, Any] = {}
    try:
        details, version = read_dir(args)
        db = build_db(details, args, version)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - its failure is a result, named in the record
        unnamed = bool(details) and all(set(d.get("pg_config") or {}) <= {""} for d in details.values())
        why = (": every group of the dumps' pg_config is named '' (gloo registers a group with the recorder "
               "before naming it, torch 2.14.1), so it cannot match entries to groups" if unnamed else "")
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:200] + why}
    bad = [c for c in db.collectives if not c.pass_check]
    return {"ok": True, "version": version, "collectives": len(db.collectives), "mismatches": [
        {"seq": c.collective_seq_id, "op": _op(str(c.collective_name)), "group": c.pg_desc,
         "state": c.collective_state, "missing_ranks": sorted(c.missing_ranks or ()),
         "expected_ranks": sorted(c.expected_ranks or ()),
         "kind": str(c.type_of_mismatch) if c.type_of_mismatch is not None else None} for c in bad[:8]]}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not os.path.isdir(args[0]):
        print("usage: python -m bench.worker.flight DIR (one flight-recorder dump per rank: DIR/rank<R>)",
              file=sys.stderr)
        return 2
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # torch's analyzer prints as it goes: stdout holds the one JSON document
    try:
        result = _torch_analyzer(args[0])
    finally:
        sys.stdout = real_stdout
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
