"""The history store on a real PostgreSQL server (tests/pg_server.py: Debian's package, started by the test): the
thirty nights of tests/history_runs.py imported, the slowing GPU and the node drained three times named on the
terminal and in JSON, two imports writing at once, and a validate whose rows carry the drift from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.history import store
from tests import history_runs as hr
from tests import pg_server
from tests.conftest import REPO, cli

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def url():
    with pg_server.server() as u:
        yield u


def test_thirty_nights_in_postgresql_name_the_drift_and_the_drains(url, tmp_path, monkeypatch):
    base = hr.recorded(tmp_path)
    folders = hr.nights(base, tmp_path / "results")
    halves = [tmp_path / "a", tmp_path / "b"]
    for i, folder in enumerate(folders):  # two imports at once, each half the nights: both halves kept
        os.makedirs(halves[i % 2], exist_ok=True)
        os.rename(folder, halves[i % 2] / folder.name)
    env = dict(os.environ, PYTHONPATH=REPO)
    procs = [subprocess.Popen([sys.executable, "-m", "bench", "history", "import", str(h), "--store", url, "--json"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in halves]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(json.loads(o)["stored"] for o, _ in outs) == [15, 15]
    found = json.loads(cli("history", "drift", "--store", url, "--json").stdout)["drifts"]
    assert [(d["kind"], d["subject"]) for d in found] == [("gpu", hr.DRIFT_GPU)]
    assert hr.DRIFT_GPU in cli("history", "drift", "--store", url).stdout
    drained = json.loads(cli("history", "drained", "--times", "3", "--store", url, "--json").stdout)["nodes"]
    assert [(n["host"], n["times"]) for n in drained] == [(hr.DRAINED_NODE, 3)]
    assert hr.DRAINED_NODE in cli("history", "drained", "--store", url).stdout
    changed = json.loads(cli("history", "changed", hr.DRAINED_NODE, "--store", url, "--json").stdout)["changed"]
    assert changed["verdict"] == "healthy" and changed["changed"] == {}  # its last night: healthy, new driver
    monkeypatch.setenv(store.ENV, url)
    os.mkdir(tmp_path / "next")
    rec = hr.recorded(tmp_path / "next")
    (row,) = [c for c in rec["checks"] if c["check"] == "drift"]
    assert (row["node"], row["status"]) == (hr.DRIFT_GPU, "WARN")
    conn = store.open_store(url)
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 31
    assert conn.execute("SELECT COUNT(*) FROM checks WHERE run_id = ?", (rec["run_id"],)).fetchone()[0] == \
        len(rec["checks"])
    conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    conn.close()
    got = cli("history", "--store", url)
    assert got.returncode == 2 and "schema version 0; this bench reads version 1" in got.stderr
