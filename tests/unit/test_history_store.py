"""The history store is a record, never a dependency: two validates writing at once lose nothing; a locked store,
a full filesystem, an older schema and a network filesystem each cost one line, and the validate's rows, verdict,
exit status and folder are what they are without a store. The validates are real quick ones of three nodes whose
launches tests/scale_fixtures.py answers from recorded real outputs (no GPU here)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from bench.history import schema, store
from tests import history_runs as hr
from tests.conftest import REPO, cli

LINE = "bench validate: history not kept"

VALIDATES = textwrap.dedent("""
    import sys, tempfile
    import pytest
    from tests import history_runs
    for i in range(int(sys.argv[1])):
        history_runs.recorded(__import__("pathlib").Path(tempfile.mkdtemp(dir=sys.argv[2])))
""")


def _judged(rec: dict) -> tuple:
    """What a validate decided: every row's check, node and status, the nodes' verdicts, result, exit status."""
    return ([(c["check"], c["node"], c["status"]) for c in rec["checks"]],
            {h: n["verdict"] for h, n in rec["nodes"].items()}, rec["result"], rec["exit_status"])


@pytest.fixture(scope="module")
def without(tmp_path_factory):
    """A validate with the store off: what every broken store must leave as it is."""
    return _judged(hr.recorded(tmp_path_factory.mktemp("off")))


def _validate(tmp_path, capsys) -> tuple[dict, list[str]]:
    rec = hr.recorded(tmp_path)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith(LINE)]
    assert os.path.exists(os.path.join(rec["run_dir"], "results.jsonl"))
    return rec, lines


@pytest.mark.process
def test_two_validates_writing_to_one_store_at_once_lose_nothing(tmp_path):
    path = tmp_path / "history.sqlite"
    env = dict(os.environ, VITBENCH_HISTORY=str(path), PYTHONPATH=REPO)
    procs = [subprocess.Popen([sys.executable, "-c", VALIDATES, "6", str(tmp_path)], env=env, cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert not any(LINE in e for e in errs), [x for e in errs for x in e.splitlines() if LINE in x]
    conn = sqlite3.connect(path)
    runs = conn.execute("SELECT run_id, run_dir FROM runs").fetchall()
    assert len(runs) == 12
    for run_id, run_dir in runs:  # every run's rows, as many as its record in its folder has
        import json
        with open(os.path.join(run_dir, "results.jsonl")) as f:
            rec = json.loads(f.readline())
        assert conn.execute("SELECT COUNT(*) FROM checks WHERE run_id = ?", (run_id,)).fetchone()[0] == \
            len(rec["checks"])
        assert conn.execute("SELECT COUNT(*) FROM figures WHERE run_id = ? AND kind = 'gpu'",
                            (run_id,)).fetchone()[0] == 24


@pytest.mark.process
def test_a_locked_store_is_one_line_and_the_verdict_stands(tmp_path, monkeypatch, capsys, without):
    path = tmp_path / "history.sqlite"
    store.open_store(str(path)).close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sqlite3, sys, time
        c = sqlite3.connect(sys.argv[1], isolation_level=None)
        c.execute("BEGIN EXCLUSIVE")
        print("held", flush=True)
        sys.stdin.read()
    """), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv(store.ENV, str(path))
        monkeypatch.setenv(store.BUSY_ENV, "0.3")
        rec, lines = _validate(tmp_path, capsys)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert len(lines) == 1 and "locked by another writer" in lines[0], lines
    assert _judged(rec) == without


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


@contextlib.contextmanager
def tmpfs(where, size: str):
    """A real tmpfs of `size` mounted at where (mount(2): root only), unmounted after."""
    libc = _libc()
    os.makedirs(where, exist_ok=True)
    if libc.mount(b"tmpfs", str(where).encode(), b"tmpfs", 0, f"size={size}".encode()) != 0:
        pytest.skip(f"cannot mount a tmpfs here ({os.strerror(ctypes.get_errno())}): the test needs root")
    try:
        yield where
    finally:
        libc.umount2(str(where).encode(), 2)  # MNT_DETACH


def test_a_store_on_a_full_filesystem_is_one_line_and_the_verdict_stands(tmp_path, monkeypatch, capsys, without):
    with tmpfs(tmp_path / "small", "256k") as small:
        path = small / "history.sqlite"
        store.open_store(str(path)).close()
        fd = os.open(small / "filler", os.O_CREAT | os.O_WRONLY)  # the rest taken, as on a full disk
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        os.close(fd)
        monkeypatch.setenv(store.ENV, str(path))
        rec, lines = _validate(tmp_path, capsys)
        assert len(lines) == 1 and "full" in lines[0], lines
        assert _judged(rec) == without


def test_an_older_schema_version_is_refused_in_one_line(tmp_path, monkeypatch, capsys, without):
    path = tmp_path / "history.sqlite"
    store.open_store(str(path)).close()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE meta SET value = '0' WHERE key = ?", (schema.KEY,))
    got = cli("history", "drift", "--store", str(path))
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1
    assert "schema version 0; this bench reads version 1" in got.stderr
    monkeypatch.setenv(store.ENV, str(path))
    rec, lines = _validate(tmp_path, capsys)
    assert len(lines) == 1 and "schema version 0" in lines[0], lines
    assert _judged(rec) == without


MOUNTS = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:45 / /shared rw,relatime shared:20 - nfs4 fs1:/export rw,vers=4.2,hard,proto=tcp,local_lock=none,addr=10.1.0.5
41 22 0:46 / /scratch rw,relatime shared:21 - ext4 /dev/sdb1 rw
42 22 0:47 / /nolocks rw,relatime shared:22 - nfs fs1:/old rw,vers=3,nolock,addr=10.1.0.5
"""


def test_a_network_filesystem_or_one_without_locks_is_refused_saying_why(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTS)  # lines in proc(5)'s format, NFS options as nfs(5) gives them: no NFS server here
    with pytest.raises(store.Unavailable, match="nfs4 /shared.*network filesystem.*not --out"):
        store.check_filesystem("/shared/history.sqlite", str(info))
    with pytest.raises(store.Unavailable, match="network filesystem"):
        store.check_filesystem("/nolocks/h.sqlite", str(info))
    store.check_filesystem(str(tmp_path / "h.sqlite"))  # this machine's real filesystem: locks
    got = cli("history", "--store", "postgresql://127.0.0.1:1/bench")  # nothing listens on port 1
    assert got.returncode == 2 and "cannot connect" in got.stderr and len(got.stderr.splitlines()) == 1
    got = cli("history", "--store", "mysql://db/bench")
    assert got.returncode == 2 and "not a store bench keeps" in got.stderr
