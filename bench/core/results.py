"""Result records: one schema with a version, atomic appends, tolerant reads.

A record is one JSON object per line of results.jsonl with `schema_version`,
`kind` (run, point, comm, probe, verdict, ...), `status` (ok, failed, oom,
skipped), the resolved config, provenance and the figures. The JSON Schema
is bench/schemas/record.schema.json; `validate()` checks a record against it,
and `read()` checks every record it reads: one that does not match is named
(file:line and why) and skipped, like a torn line.

Appends are one write of one line, flushed and fsynced: a crash mid-write
leaves at most one torn last line, which `read()` reports and skips.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from bench.core import storage
from bench.core.errors import BadInput, StorageFailed

SCHEMA_VERSION = 1
KINDS = ("run", "point", "alone", "numerics", "comm", "probe", "verdict", "validate", "soak")
STATUSES = ("ok", "failed", "oom", "skipped", "interrupted")
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "schemas", "record.schema.json")


def write_json_atomic(path: str, data: Any, mode: int | None = None) -> None:
    """Write a whole JSON file so readers see the old or the new one, never half (write_text_atomic)."""
    write_text_atomic(path, json.dumps(data, indent=1), mode)


def write_text_atomic(path: str, text: str, mode: int | None = None) -> None:
    """Write a whole file so readers see the old or the new one, never half.

    The directory must exist: a run directory removed mid-run is not
    silently made again (the ranks would then write where no log is). On
    any OSError (disk full, read-only, directory gone) the temporary file is
    removed and StorageFailed names the path. `mode` (0o600 for a secret):
    the file has it from its creation, so no reader ever finds it wider.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if mode is None:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        else:  # a new file: a leftover of the same name would keep its own, wider, mode
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                os.unlink(tmp)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with open(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageFailed(path, e.strerror or str(e)) from None


def append(path: str, record: dict[str, Any]) -> None:
    """Append one record as one line: a single write, flushed and fsynced.

    If the write fails (a full disk writes part of the line, or nothing),
    the file is cut back to its last whole line and StorageFailed carries
    the record, for the caller to print: nothing measured is lost.
    """
    line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        raise StorageFailed(path, e.strerror or str(e), record=record) from None
    size = None
    try:
        size = os.fstat(fd).st_size
        # A previous crash may have left a torn line without its newline:
        # start on a fresh line so this record is not glued to it.
        if size > 0:
            with open(path, "rb") as r:
                r.seek(-1, os.SEEK_END)
                if r.read(1) != b"\n":
                    line = "\n" + line
        data = line.encode()
        written = os.write(fd, data)
        if written != len(data):  # a short write: the file system filled up under this line
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fsync(fd)
    except OSError as e:
        if size is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
        raise StorageFailed(path, e.strerror or str(e), record=record) from None
    finally:
        os.close(fd)


@dataclass
class ReadResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "file:line: why"


# Lines of a file named one by one when skipped; past these, one line counts the rest.
SKIPPED_NAMED = 5
# Every record bench writes starts with this (make_record puts the version first): a torn
# line that does too is a torn record, not a sign of a file that is no results file at all.
_RECORD_START = '{"schema_version"'


def read(path: str) -> ReadResult:
    """Read a results.jsonl; torn lines are skipped and named, unknown versions refused.

    A file none of whose lines is, or begins, a bench record (random bytes, a
    PNG, a tar, another program's JSON lines) is refused in one line: it is no
    results file, and a note per line of it would say nothing more. The notes
    of a results file are capped: the first SKIPPED_NAMED, then a count.
    """
    out = ReadResult()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})") from None
    if b"\0" in data:  # JSON escapes every control character: a NUL byte is a binary file (an image, a tar)
        raise BadInput(f"{path} is not a bench results file (binary: it holds NUL bytes)")
    lines = data.decode("utf-8", errors="replace").split("\n")
    ours = False
    for i, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            ours = ours or text.startswith(_RECORD_START) or _RECORD_START.startswith(text)
            out.skipped.append(f"{path}:{i}: torn or invalid line skipped ({e.msg})")
            continue
        if not isinstance(rec, dict):
            out.skipped.append(f"{path}:{i}: not a JSON object, skipped")
            continue
        if "schema_version" not in rec:
            out.skipped.append(f"{path}:{i}: a JSON object but no bench record (no schema_version), skipped")
            continue
        ours = True
        version = rec.get("schema_version")
        if version != SCHEMA_VERSION:
            raise BadInput(f"{path}:{i}: schema_version {version!r} is not supported "
                           f"(this bench reads version {SCHEMA_VERSION})")
        problem = schema_problem(rec)
        if problem is not None:
            out.skipped.append(f"{path}:{i}: record does not match the schema, skipped ({problem})")
            continue
        out.records.append(rec)
    if out.skipped and not ours:
        raise BadInput(f"{path} is not a bench results file (no line of it is a bench record)")
    if len(out.skipped) > SKIPPED_NAMED:
        more = len(out.skipped) - SKIPPED_NAMED
        out.skipped[SKIPPED_NAMED:] = [f"{path}: {more} more line(s) skipped"]
    return out


def latest_by_point(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The last record of each sweep point, by (sweep, point_id): a failed point run again has several."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if r.get("kind") == "point" and "point_id" in r:
            out[(r.get("sweep") or r.get("suite") or "", r["point_id"])] = r
    return out


def iter_result_files(paths: list[str]) -> Iterator[str]:
    """results.jsonl files under the given files or directories."""
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in sorted(os.walk(p)):
                if "results.jsonl" in files:
                    yield os.path.join(root, "results.jsonl")
        elif os.path.isfile(p):
            yield p
        else:
            raise BadInput(f"{p}: no such file or directory")


def new_run_id(root: str, prefix: str = "") -> str:
    """A run id that never collides, even for two runs in the same second.

    The directory is created exclusively (mkdir fails if it exists), so the
    id is reserved by the filesystem, not by luck.
    """
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out: cannot create {root!r} ({e.strerror})") from None
    if storage.read_only(root):
        raise BadInput(f"--out: {root!r} is on a read-only file system")
    if not os.access(root, os.W_OK):
        raise BadInput(f"--out: {root!r} is not writable")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    while True:
        run_id = f"{prefix}{stamp}-{secrets.token_hex(3)}"
        try:
            os.mkdir(os.path.join(root, run_id))
            return run_id
        except FileExistsError:
            continue
        except OSError as e:
            raise BadInput(f"--out: cannot create a run directory in {root!r} ({e.strerror})") from None


def make_record(kind: str, status: str, **body: Any) -> dict[str, Any]:
    assert kind in KINDS and status in STATUSES, (kind, status)
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "status": status,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **body}


@functools.cache
def _validator():
    import jsonschema

    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(record: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if the record does not match the schema."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is not None:
        raise error


def schema_problem(record: dict[str, Any]) -> str | None:
    """Why the record does not match the schema, in one line, or None when it does."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the record"
    return f"{where}: {error.message[:200]}"
