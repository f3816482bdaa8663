"""Storage faults in the files bench writes, and the shared-directory answer a host gives in preflight.

A real full device here is /dev/full (every write: ENOSPC). Where a fault
cannot be made without a mount (a short write, fsync failing), the one
system call is replaced for the test and the file left on disk is checked.
The mounts themselves (tmpfs, read-only bind) are in tests/multiproc/test_storage_faults.py.
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from bench.cluster import shared_dir
from bench.core import results, storage
from bench.core.errors import BadInput, StorageFailed

RECORD = {"kind": "run", "status": "ok", "figures": {"images_per_s": 123.4}}


def test_append_to_a_full_device_carries_the_record():
    with pytest.raises(StorageFailed) as e:
        results.append("/dev/full", RECORD)
    assert e.value.record == RECORD and e.value.strerror == os.strerror(errno.ENOSPC)
    assert e.value.line() == ("cannot write /dev/full (No space left on device); the record it would have held "
                              "is on stdout: nothing measured is lost")


def test_a_short_append_is_cut_back_to_the_last_whole_line(tmp_path, monkeypatch):
    path = str(tmp_path / "results.jsonl")
    results.append(path, {"kind": "run", "n": 1})
    before = open(path, "rb").read()
    real_write = os.write

    def half(fd, data):  # what a file system that fills under the line does: part of it, then no more
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(results.os, "write", half)
    with pytest.raises(StorageFailed) as e:
        results.append(path, {"kind": "run", "n": 2, "pad": "x" * 200})
    assert e.value.record["n"] == 2
    assert open(path, "rb").read() == before  # no torn line
    monkeypatch.setattr(results.os, "write", real_write)
    results.append(path, {"kind": "run", "n": 3})
    assert [json.loads(line)["n"] for line in open(path)] == [1, 3]


def test_write_json_atomic_leaves_no_temporary_and_the_old_file(tmp_path, monkeypatch):
    path = str(tmp_path / "rank0.json")
    results.write_json_atomic(path, {"old": True})

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results.os, "fsync", full)
    with pytest.raises(StorageFailed, match=r"rank0\.json: No space left on device"):
        results.write_json_atomic(path, {"new": True})
    assert os.listdir(tmp_path) == ["rank0.json"]
    assert json.load(open(path)) == {"old": True}


def test_a_removed_run_directory_is_not_made_again(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert storage.subdir(str(run_dir), "logs") == str(run_dir / "logs")
    assert storage.subdir(str(run_dir), "logs") == str(run_dir / "logs")  # already there: fine
    (run_dir / "logs").rmdir()
    run_dir.rmdir()
    with pytest.raises(StorageFailed, match="the run directory is gone"):
        storage.subdir(str(run_dir), "ranks")
    with pytest.raises(StorageFailed, match="summary.json"):
        results.write_json_atomic(str(run_dir / "summary.json"), {})
    assert not run_dir.exists()
    assert storage.problem(str(run_dir)) == f"the run directory {run_dir} was removed during the run"


def test_problem_sees_nothing_wrong_with_a_healthy_directory(tmp_path):
    assert storage.problem(str(tmp_path)) is None
    assert storage.read_only(str(tmp_path)) is False


def test_floor_and_the_refusal_line(tmp_path, monkeypatch):
    assert storage.floor_bytes(1) == 48 * 1024 and storage.floor_bytes(2) == 64 * 1024
    storage.check_room(str(tmp_path / "not" / "yet"), 2)  # a real disk with room: passes, makes nothing
    assert not (tmp_path / "not").exists()
    monkeypatch.setattr(storage, "free_bytes", lambda path: 40 * 1024)
    with pytest.raises(BadInput) as e:
        storage.check_room(str(tmp_path), 2)
    assert str(e.value).startswith(f"--out: {tmp_path} has 40 KiB free; a 2-rank run writes at least 64 KiB")


def test_shared_dir_same_directory(tmp_path):
    with shared_dir.planted(str(tmp_path)) as (path, nonce):
        ans = shared_dir.answer(path, nonce)
        fs = shared_dir.mount_of(str(tmp_path))
        assert ans == {"seen": "same", "writable": True, "fs": fs} and fs is not None
        assert shared_dir.problem(ans, str(tmp_path)) is None
        assert os.listdir(tmp_path) == [os.path.basename(path)]  # the write probe cleaned up after itself
    assert os.listdir(tmp_path) == []  # and the nonce file is gone


def test_shared_dir_another_directory_at_the_path(tmp_path):
    with shared_dir.planted(str(tmp_path)) as (path, nonce):
        other = tmp_path / "elsewhere"
        other.mkdir()
        missing = shared_dir.answer(str(other / os.path.basename(path)), nonce)
        assert {k: x for k, x in missing.items() if k != "fs"} == {"seen": "missing"}
        stale = other / "stale"
        stale.write_text("0123456789abcdef")
        assert shared_dir.answer(str(stale), nonce)["seen"] == "other"
    for ans in (missing, {"seen": "other"}):
        assert shared_dir.problem(ans, str(tmp_path)) == \
            f"{tmp_path} is not the directory bench wrote (not shared storage?)"
    assert shared_dir.problem({"seen": "same", "writable": False, "error": "Read-only file system"},
                              str(tmp_path)) == f"cannot write in {tmp_path} (Read-only file system)"
    assert shared_dir.problem(None, str(tmp_path)) == f"did not check {tmp_path}"


def test_the_answer_runs_from_its_source_alone(tmp_path):
    """Preflight sends ANSWER_SOURCE to hosts that may not have bench importable: it must stand alone."""
    ns: dict = {}
    exec(compile(shared_dir.ANSWER_SOURCE, "<probe>", "exec"), ns)
    with shared_dir.planted(str(tmp_path)) as (path, nonce):
        assert ns["answer"](path, nonce) == {"seen": "same", "writable": True, "fs": shared_dir.mount_of(path)}
