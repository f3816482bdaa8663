"""bench history over thirty nights of a 3-host validate (tests/history_runs.py: one real validate record,
derived, one GPU 0.3% slower each night, one node drained three times): the drift and the repeat drains named,
on the terminal and in JSON, and the drift's WARN in the next validate's rows."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from bench.history import drift, queries, store
from tests import history_runs as hr
from tests.conftest import cli


@pytest.fixture(scope="module")
def thirty(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("history")
    base = hr.recorded(tmp)
    hr.nights(base, tmp / "results")
    return tmp, base


@pytest.fixture(scope="module")
def pristine(thirty):
    """The thirty nights imported once by `bench history import` (each test gets its own copy of the file)."""
    tmp, base = thirty
    path = str(tmp / "history.sqlite")
    got = cli("history", "import", str(tmp / "results"), "--json", "--store", path)
    assert got.returncode == 0, got.stderr
    return path, json.loads(got.stdout), base


@pytest.fixture
def imported(pristine, tmp_path, monkeypatch):
    path = str(tmp_path / "history.sqlite")
    shutil.copy(pristine[0], path)  # closed by the import: its WAL checkpointed into the file
    monkeypatch.setenv(store.ENV, path)
    return path, pristine[1], pristine[2]


def test_import_stores_thirty_runs_once(imported, thirty):
    path, doc, _ = imported
    assert (doc["stored"], doc["already"], doc["files"]) == (30, 0, 30)
    again = json.loads(cli("history", "import", str(thirty[0] / "results"), "--json").stdout)
    assert (again["stored"], again["already"]) == (0, 30)


def test_the_slowing_gpu_is_named_and_no_other_subject(imported):
    got = cli("history", "drift", "--json")
    assert got.returncode == 0, got.stderr
    found = json.loads(got.stdout)["drifts"]
    assert [(d["kind"], d["subject"]) for d in found] == [("gpu", hr.DRIFT_GPU)]
    (d,) = found
    assert d["n"] == drift.WINDOW and d["p"] < drift.ALPHA
    assert 0.04 < d["drop"] < 0.07  # 0.3% a night over the last 20 nights: 5.7%
    text = cli("history", "drift")
    assert hr.DRIFT_GPU in text.stdout and "Mann-Kendall" in text.stdout


def test_a_node_drained_three_times_and_its_relapses(imported):
    doc = json.loads(cli("history", "drained", "--times", "3", "--days", "30", "--json").stdout)
    assert [(n["host"], n["times"]) for n in doc["nodes"]] == [(hr.DRAINED_NODE, 3)]
    assert json.loads(cli("history", "drained", "--times", "4", "--json").stdout)["nodes"] == []
    text = cli("history", "drained", "--times", "3").stdout
    assert hr.DRAINED_NODE in text and "3" in text
    rel = json.loads(cli("history", "relapses", "--days", "7", "--json").stdout)["relapses"]
    assert [(r["host"], r["after_days"]) for r in rel] == [(hr.DRAINED_NODE, 5.0), (hr.DRAINED_NODE, 5.0)]
    assert json.loads(cli("history", "relapses", "--days", "4", "--json").stdout)["relapses"] == []
    summary = cli("history").stdout
    assert hr.DRAINED_NODE in summary and hr.DRIFT_GPU in summary


def test_a_gpus_figures_over_time_and_what_changed(imported):
    runs = json.loads(cli("history", "show", hr.DRIFT_GPU, "--json").stdout)["runs"]
    assert len(runs) == 30 and runs[-1]["figures"]["gpu"][1] < 0.93 < 0.99 < runs[0]["figures"]["gpu"][1]
    assert "▁" in cli("history", "show", hr.DRIFT_GPU).stdout
    path = imported[0]
    conn = store.open_store(path)
    first_drain = conn.execute("SELECT run_id FROM runs ORDER BY t LIMIT 1 OFFSET ?", (hr.DRIVER_NIGHT,)).fetchone()[0]
    conn.execute("DELETE FROM runs WHERE t > (SELECT t FROM runs WHERE run_id = ?)", (first_drain,))
    conn.execute("DELETE FROM nodes WHERE run_id NOT IN (SELECT run_id FROM runs)")
    conn.close()
    doc = json.loads(cli("history", "changed", hr.DRAINED_NODE, "--json").stdout)["changed"]
    assert doc["verdict"] == "drain" and doc["changed"] == {"driver": ["570.211.01", "575.57.08"]}
    assert "575.57.08" in cli("history", "changed", hr.DRAINED_NODE).stdout


def test_the_next_validate_warns_of_the_drift_with_its_history(imported, tmp_path):
    rec = hr.recorded(tmp_path)
    (row,) = [c for c in rec["checks"] if c["check"] == "drift"]
    assert (row["node"], row["status"], row["gpu"]) == (hr.DRIFT_GPU, "WARN", 5)
    assert "over its last 20 runs" in row["value"] and row["reason"].count(" 0.9") >= 10
    assert rec["nodes"]["node0001"]["verdict"] == "degraded" and rec["exit_status"] == 0
    assert [c for c in rec["checks"] if c["status"] == "WARN"] == [row]
    conn = store.open_store(imported[0])
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 31  # and it was kept
    # report.html: a sparkline per node, its 20 earlier runs and this one; the drained node's drains named
    from bench.render.html.report import beside

    page = open(beside(rec)[0]).read()
    cells = re.findall(r'<a class="cell[^>]*data-host="(node\d+)"[^>]*title="([^"]*)">\1<svg class="spark"[^>]*>'
                       r'<polyline points="([^"]+)"/></svg></a>', page)
    assert [h for h, _, _ in cells] == ["node0000", "node0001", "node0002"]
    titles = {h: t for h, t, _ in cells}
    assert all(len(p.split()) == drift.WINDOW + 1 for _, _, p in cells)
    assert "history: 21 run(s)" in titles["node0001"] and "drained in 2" in titles["node0002"]  # nights 15 and 21 of the last 20


def test_the_drift_statistic_on_series_without_a_trend_and_with_one():
    flat = [1.0 + 0.002 * ((i * 7) % 5 - 2) for i in range(20)]
    assert not drift.test(flat)["alarm"]
    assert drift.test(flat[:9]) is None
    falling = [1.0 - 0.003 * i for i in range(20)]
    assert drift.test(falling)["alarm"]
    small = [1.0 - 0.0005 * i for i in range(20)]  # significant but under 2% over the window: not acted on
    r = drift.test(small)
    assert r["p"] < drift.ALPHA and not r["alarm"]
    s, p = drift.mann_kendall(list(range(10, 0, -1)))
    assert s == -45 and p == pytest.approx(4.15e-5, rel=0.01)
    assert queries.identity_of(None) is None


def test_retention_prunes_the_oldest_runs_and_every_row_of_them(imported):
    import time

    path = imported[0]
    days = (time.time() - hr.START.timestamp()) / 86400 - 14.5  # nights 0-14 older than that, 15-29 within it
    doc = json.loads(cli("history", "prune", "--keep-days", f"{days:.4f}", "--json").stdout)
    assert doc["pruned"] == 15
    conn = store.open_store(path)
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 15
    for table in ("nodes", "figures", "checks", "provenance"):
        assert conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id NOT IN (SELECT run_id FROM runs)").fetchone()[0] == 0
    assert [n["times"] for n in json.loads(cli("history", "drained", "--times", "1", "--json").stdout)["nodes"]] == [2]


def test_a_store_that_is_not_there_or_a_bad_option_is_one_line(tmp_path):
    got = cli("history", "drift", "--store", str(tmp_path / "none.sqlite"))
    assert got.returncode == 2 and "no history store at" in got.stderr and len(got.stderr.splitlines()) == 1
    assert not (tmp_path / "none.sqlite").exists()
    got = cli("history", "drained", "--times", "0", "--store", str(tmp_path / "none.sqlite"))
    assert got.returncode == 2 and "--times" in got.stderr and len(got.stderr.splitlines()) == 1


def test_a_node_whose_verdict_moved_gets_what_changed_since_its_last_healthy_run_on_its_row(imported, tmp_path):
    rec = hr.recorded(tmp_path, bad={hr.DRAINED_NODE: "slow-gpu"})  # its GPU 3 at 60%: drained tonight
    (row,) = [c for c in rec["checks"] if c["check"] == "changed"]
    assert (row["node"], row["status"]) == (hr.DRAINED_NODE, "WARN")
    assert row["value"] == "driver 575.57.08 -> 570.211.01"  # the nights from DRIVER_NIGHT on had the newer one
    assert "2026-11-30" in row["reference"]
    assert rec["nodes"][hr.DRAINED_NODE]["verdict"] == "drain" and rec["exit_status"] == 1
    assert not [c for c in rec["checks"] if c["check"] == "changed" and c["node"] != hr.DRAINED_NODE]


@pytest.mark.parametrize("action", ["", "import", "show", "drained", "relapses", "drift", "changed", "prune"])
def test_every_action_has_its_help(action):
    got = cli("history", *([action] if action else []), "--help")
    assert got.returncode == 0 and got.stdout.startswith(f"usage: bench history {action}".rstrip()), got.stderr


def test_ties_leave_the_variance_they_do_not_add():
    """Ten runs of two values, five of each, falling once: S is -25 of 45 pairs, 50 pairs less being ties. With the
    tie correction its variance is 91.7, not 125, and p 0.0061, not 0.016."""
    s, p = drift.mann_kendall([1.0] * 5 + [0.9] * 5)
    assert s == -25 and p == pytest.approx(0.00609, rel=0.01)
