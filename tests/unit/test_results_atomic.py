"""results.jsonl survives crashes and concurrency; run ids never collide."""

from __future__ import annotations

import pytest
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.core import results

REPO = Path(__file__).resolve().parents[2]


def _rec(i: int, pad: int = 0) -> dict:
    return results.make_record("probe", "ok", run_id=f"r{i}", pad="x" * pad)


def test_append_is_one_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    for i in range(3):
        results.append(str(path), _rec(i))
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 4
    assert [json.loads(x)["run_id"] for x in lines[:-1]] == ["r0", "r1", "r2"]


def test_torn_line_is_skipped_and_next_append_starts_fresh(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    results.append(str(path), _rec(0))
    # What a crash in the middle of the second append leaves: half a line, no newline.
    whole = json.dumps(_rec(1))
    with open(path, "a") as f:
        f.write(whole[: len(whole) // 2])
    got = results.read(str(path))
    assert [r["run_id"] for r in got.records] == ["r0"]
    assert len(got.skipped) == 1 and got.skipped[0].startswith(f"{path}:2: torn")
    results.append(str(path), _rec(2))
    got = results.read(str(path))
    assert [r["run_id"] for r in got.records] == ["r0", "r2"]
    assert len(got.skipped) == 1  # the torn line stays torn, named; the new record is whole


_WRITER = """
import sys
from bench.core import results
path, pad = sys.argv[1], int(sys.argv[2])
i = 0
while True:
    results.append(path, results.make_record("probe", "ok", run_id=f"r{i}", pad="x" * pad))
    i += 1
    print(i, flush=True)
"""


@pytest.mark.process
def test_sigkill_mid_append_leaves_a_readable_file(tmp_path: Path) -> None:
    """A real crash: a writer appending 4 MiB records is SIGKILLed while it writes."""
    path = tmp_path / "results.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(4 << 20)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(5):  # let it finish a few appends first
        assert proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    got = results.read(str(path))
    assert len(got.records) >= 5
    assert all(r["pad"] == "x" * (4 << 20) for r in got.records)
    # At most the last line is torn, and it is named, not fatal.
    assert len(got.skipped) <= 1
    n_lines = path.read_bytes().count(b"\n") + (0 if path.read_bytes().endswith(b"\n") else 1)
    assert len(got.records) + len(got.skipped) == n_lines
    results.append(str(path), _rec(-1))
    after = results.read(str(path))
    assert after.records[-1]["run_id"] == "r-1" and len(after.records) == len(got.records) + 1


_APPENDER = """
import sys
from bench.core import results
for i in range(200):
    results.append(sys.argv[1], results.make_record("probe", "ok", run_id=f"{sys.argv[2]}-{i}", pad="y" * 2000))
"""


@pytest.mark.process
def test_concurrent_appenders_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), f"p{k}"], cwd=REPO) for k in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    got = results.read(str(path))
    assert got.skipped == []
    assert sorted(r["run_id"] for r in got.records) == sorted(f"p{k}-{i}" for k in range(4) for i in range(200))


_IDS = """
import sys
from bench.core import results
print("\\n".join(results.new_run_id(sys.argv[1]) for _ in range(100)))
"""


@pytest.mark.process
def test_run_ids_never_collide_across_threads_and_processes(tmp_path: Path) -> None:
    root = str(tmp_path / "out")
    # 4 processes and 32 threads, all within a second or two: the same time stamp.
    procs = [subprocess.Popen([sys.executable, "-c", _IDS, root], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    with ThreadPoolExecutor(32) as pool:
        thread_ids = list(pool.map(lambda _: results.new_run_id(root), range(400)))
    proc_ids = [line for p in procs for line in p.communicate(timeout=120)[0].split()]
    assert all(p.returncode == 0 for p in procs)
    ids = thread_ids + proc_ids
    assert len(ids) == 800 and len(set(ids)) == 800
    assert sorted(os.listdir(root)) == sorted(ids)  # each id is a directory made by exactly one caller


def test_same_second_same_random_part_still_unique(tmp_path: Path, monkeypatch) -> None:
    """Even when the random part repeats, the exclusive mkdir makes the second caller pick again."""
    draws = iter(["aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr(results.secrets, "token_hex", lambda n: next(draws))
    monkeypatch.setattr(results.time, "strftime", lambda fmt, *a: "20260101-000000")
    root = str(tmp_path)
    assert results.new_run_id(root) == "20260101-000000-aaaaaa"
    assert results.new_run_id(root) == "20260101-000000-bbbbbb"

