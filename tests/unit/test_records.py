"""What the ranks wrote, read back by name (bench.launch.records): a file a rank said it wrote is waited for, then
an error naming the rank, the file and the host; a rank that did not say so gets one look; bench's view of every
rank is kept in ranks.json."""

from __future__ import annotations

import json
import threading
import time

import pytest

from bench.core.conversation.hub import RankState
from bench.launch import records


def _ranks(**status) -> dict[int, RankState]:
    return {int(r[1:]): RankState(f"node{r[1:]}", 100, 0.0, status=s) for r, s in status.items()}


def test_a_file_a_rank_said_it_wrote_is_waited_for(tmp_path):
    (tmp_path / "alone").mkdir()
    late = tmp_path / "alone" / "rank1.json"
    threading.Timer(0.4, lambda: late.write_text('{"ok": 1}')).start()  # a client whose cache catches up late
    t0 = time.monotonic()
    got, missing = records.read_rank(str(tmp_path), "alone/rank1.json", 1, _ranks(r1="ok"))
    assert got == {"ok": 1} and missing is None and time.monotonic() - t0 >= 0.3


def test_a_file_still_missing_names_the_rank_the_file_and_the_host(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "SAID_WAIT_S", 0.3)
    with pytest.raises(records.MissingRecord, match=r"rank 3 on node3 said it wrote .*alone/rank3.json, but after"):
        records.read_said(str(tmp_path), "alone/rank3.json", 3, "node3", wait_s=0.3)
    (tmp_path / "summary.json").write_text('{"half": ')  # torn: not whole JSON either
    with pytest.raises(records.MissingRecord, match="not whole JSON"):
        records.read_said(str(tmp_path), "summary.json", 0, "node0", wait_s=0.2)


def test_a_rank_that_did_not_say_it_is_done_gets_one_look_no_wait(tmp_path):
    t0 = time.monotonic()
    assert records.read_rank(str(tmp_path), "alone/rank0.json", 0, _ranks(r0="lost")) == (None, None)
    assert records.read_rank(str(tmp_path), "alone/rank5.json", 5, {}) == (None, None)
    assert time.monotonic() - t0 < 0.2


def test_reports_come_from_the_connection_else_by_name_and_silent_ranks_have_none(tmp_path):
    ranks = _ranks(r0="ok", r1="failed", r2="lost")
    ranks[1].report = {"rank": 1, "status": "failed", "error": "RuntimeError: x"}
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank2.json").write_text(json.dumps({"rank": 2, "status": "failed", "error": "Orphaned"}))
    got = records.rank_reports(str(tmp_path), ranks, world=4)  # rank 3 never said hello and wrote nothing
    assert got == [{"rank": 0, "host": "node0", "status": "ok"}, ranks[1].report,
                   {"rank": 2, "host": "node2", "status": "failed", "error": "Orphaned"}]


def test_ranks_json_and_the_folders_made_before_the_launch(tmp_path):
    ranks = _ranks(r0="ok")
    ranks[0].answers["req"] = {"big": "stacks"}
    records.keep_ranks(str(tmp_path), ranks)
    assert json.loads((tmp_path / "ranks.json").read_text()) == {
        "0": {"host": "node0", "pid": 100, "hello_at": 0.0, "started_at": None, "status": "ok", "peer": "",
              "progress_at": None, "garbled": None}}
    records.make_dirs(str(tmp_path), {"independent": True, "numerics": {"spec": {}}, "copies": {"host_mb": 64}})
    assert {"logs", "ranks", "flight", "alone", "numerics", "copies"} <= {p.name for p in tmp_path.iterdir()}
    assert not (tmp_path / "burn").exists()
