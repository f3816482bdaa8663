"""A rank's words are about itself (issue 52): whatever a rank (or anyone holding the token) sends as its report,
progress or stack answer, bench keeps only a checked copy about that rank, names the rank that sent a garbled one,
and never raises for it: over real loopback TCP against a real Hub, then bench's own readers of what it kept
(diagnose, whereabouts, the watch's json.dumps, the progress bar, bench validate's `measured`)."""

from __future__ import annotations

import functools
import io
import json
import time

import pytest

from bench.core.conversation import words
from bench.core.conversation.hub import Hub
from bench.jobs import alone
from bench.launch import execute, records, stacks, whereabouts
from bench.launch.diagnose import diagnose
from bench.render.progress import StepBar
from tests import hostile

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


@pytest.fixture
def run_dir(tmp_path):
    for d in ("logs", "ranks"):
        (tmp_path / d).mkdir()
    (tmp_path / "plan.json").write_text(json.dumps({"world_size": 3, "device": "cpu"}))
    return tmp_path


@pytest.fixture
def hub(run_dir):
    with Hub.open(str(run_dir), world=3, beat_s=0.2) as h:
        yield h


_until = hostile.until


def _rank(hub: Hub, rank: int, *msgs: dict):
    s = hostile.as_rank(hub.addr, hub.port, hub.token, rank, f"gpu-node-{rank}", *msgs)
    assert _until(lambda: rank in hub.snapshot())
    return s


_log = functools.partial(hostile.hub_log, missing_ok=True)


def test_a_report_about_another_rank_frames_only_its_sender(run_dir, hub):
    # Before: diagnose named gpu-node-0:0 with the ECC text and bench validate counted rank 0's GPU measured (FAIL).
    forged = {"rank": 0, "host": "gpu-node-0", "status": "failed", "error": ECC, "at": {"step": 7}}
    socks = [_rank(hub, 0, {"op": "done", "status": "ok", "report": None}),
             _rank(hub, 1, {"op": "done", "status": "ok", "report": None}),
             _rank(hub, 2, {"op": "done", "status": "failed", "report": forged})]
    assert _until(lambda: all(s.status for s in hub.snapshot().values()))
    files = records.rank_reports(str(run_dir), hub.snapshot(), 3)
    status, error = diagnose(str(run_dir), 1, False, 60.0, files)
    assert (error["where"], error["failed_ranks"]) == ("gpu-node-2:2", [2]), error
    assert "rank 2 on gpu-node-2 sent a report that is not about itself" in error["reason"]
    assert "ECC" not in json.dumps(files)
    assert [alone.measured(f) for f in files] == [False, False, False]
    assert "rank 2: rank 2 on gpu-node-2 sent a report that is not about itself" in _log(hub, run_dir)
    assert hub.snapshot()[2].garbled.startswith("rank 2 on gpu-node-2 sent a report")
    for s in socks:
        s.close()


@pytest.mark.parametrize("report", [{"error": "boom"}, {"rank": "0", "error": 5}, {"at": [1]}, {"at": {"step": "x"}}])
def test_a_report_without_its_rank_or_with_wrong_types_is_its_own_and_never_raises(run_dir, hub, report):
    # Before: a report without "rank" made diagnose raise KeyError: no record, a traceback.
    s = _rank(hub, 1, {"op": "done", "status": "failed", "report": report})
    assert _until(lambda: hub.snapshot()[1].status == "failed")
    files = records.rank_reports(str(run_dir), hub.snapshot(), 3)
    assert [(f["rank"], f["host"]) for f in files] == [(1, "gpu-node-1")]
    status, error = diagnose(str(run_dir), 1, False, 60.0, files)
    assert error["where"] == "gpu-node-1:1" and error["failed_ranks"] == [1], error
    s.close()


def test_a_report_file_speaks_for_the_rank_of_its_name(run_dir):
    (run_dir / "ranks" / "rank2.json").write_text(json.dumps({"rank": 0, "host": "gpu-node-0", "status": "failed",
                                                              "error": ECC}))
    (run_dir / "ranks" / "rank1.json").write_text(json.dumps({"status": "failed", "error": "boom"}))
    files = records.rank_reports(str(run_dir), {}, 3)
    assert [f["rank"] for f in files] == [1, 2] and "ECC" not in json.dumps(files)


@pytest.mark.parametrize("answer", [{"position": 1}, {"threads": [{"frames": "x"}]}, [1], {"rank": 0},
                                    {"position": {"in_flight": [{"op": 1}]}}])
def test_a_stack_answer_that_is_not_one_names_its_rank_and_never_raises(run_dir, hub, answer):
    # Before: {"position": 1} raised AttributeError in whereabouts: no record, a traceback.
    s = _rank(hub, 1)
    got = {}

    def reply():
        s.settimeout(5)
        data = b""
        while b"stacks?" not in data:
            data += s.recv(65536)
        request = json.loads(next(x for x in data.split(b"\n") if b"stacks?" in x))["request"]
        s.sendall(hostile._lines({"op": "stacks", "request": request, "answer": answer}))

    import threading
    t = threading.Thread(target=reply)
    t.start()
    got = stacks.collect(hub, str(run_dir), wait_s=3, dump_wait_s=0.5)
    t.join()
    v = whereabouts.verdict([(1, "gpu-node-1", 100)], got.answers, {}, {}, None, {}, "cpu")
    assert "rank 1 on gpu-node-1 sent a" in v.reason and "stack answer" in v.reason, v.reason
    assert v.odd[0]["rank"] == 1
    s.close()


def _dump_at_depth(frames: int, value) -> str:
    return _dump_at_depth(frames - 1, value) if frames else json.dumps(value, indent=1)


def test_a_988_deep_progress_is_never_kept_and_the_watch_can_dump_what_is(run_dir, hub):
    # Before: kept as it came; json.dumps(indent=1) in execute's watch raised RecursionError with 5 frames above it
    # (bench validate calls execute 30 deep).
    s = _rank(hub, 0)
    s.sendall(b'{"op": "progress", "progress": {"step": 3, "total": 10, "loss": 1.5, "time": 1.0, "deep": '
              + b"[" * 988 + b"]" * 988 + b"}}\n")
    assert _until(lambda: hub.progress is not None)
    assert hub.progress == {"step": 3, "total": 10, "loss": 1.5, "time": 1.0}
    _dump_at_depth(60, hub.progress)
    s.close()


@pytest.mark.parametrize("progress", [{"step": 3, "time": 1.0}, {"step": 3, "time": 1.0, "loss": None},
                                      {"step": 3, "total": 9, "time": 1.0, "epoch": 1, "epochs": 2, "loss": 0.5}])
def test_the_progress_bar_draws_whatever_progress_bench_kept(progress):
    # Before: prog["total"] raised KeyError and f"{loss:.3f}" a ValueError for a string: a terminal run crashed.
    from rich.console import Console
    from rich.progress import Progress
    bar = StepBar(enabled=False)
    bar.bar = Progress(console=Console(file=io.StringIO()))
    bar.update(words.progress(progress))
    bar.update({"step": "x", "loss": "a string", "total": -1})  # even one never checked
    bar.close()


@pytest.mark.parametrize("bad", ['{"step": "3", "time": 1.0}', '{"step": 3, "time": 1.0, "loss": "x"}',
                                 '{"step": 3}', '{"step": -1, "time": 1.0}', '{"step": 3, "time": 1e400}'])
def test_a_progress_that_is_not_one_is_ignored_and_named(run_dir, hub, bad):
    s = _rank(hub, 2)
    s.sendall(b'{"op": "progress", "progress": ' + bad.encode() + b"}\n")
    assert _until(lambda: "rank 2: a progress that is not one a rank sends" in _log(hub, run_dir))
    assert hub.progress is None and hub.snapshot()[2].garbled is not None
    s.close()


def test_a_1_mib_progress_or_report_keeps_what_its_schema_allows(run_dir, hub):
    # Before: one 1 MiB line of `[],` kept as the rank's progress cost 26 MiB of bench's RSS, as a report 51 MiB.
    junk = [[] for _ in range((1 << 20) // 4 - 256)]  # "[], " each: the line just under MAX_LINE
    s = _rank(hub, 0, {"op": "progress", "progress": {"step": 1, "time": 1.0, "junk": junk}},
              {"op": "done", "status": "failed", "report": {"error": "x", "at": {"step": 1, "in_flight": []},
                                                            "junk": junk}})
    assert _until(lambda: hub.snapshot()[0].status == "failed")
    rs = hub.snapshot()[0]
    assert len(json.dumps(rs.progress)) < 200 and len(json.dumps(rs.report)) < 300
    assert rs.kept <= words.KEPT_MAX
    s.close()


def test_a_rank_whose_kept_answers_pass_the_budget_is_dropped(run_dir, hub, monkeypatch):
    monkeypatch.setattr(words, "KEPT_MAX", 2000)
    s = _rank(hub, 1)
    frame = {"file": "f" * 300, "line": 1, "function": "g", "code": "c"}
    hub._asked.add("r1")
    s.sendall(hostile._lines({"op": "stacks", "request": "r1", "answer": {"threads": [{"frames": [frame] * 20}]}}))
    assert _until(lambda: hub.snapshot()[1].status == "lost")
    assert hub.snapshot()[1].answers == {}
    assert "rank 1: dropped: what bench keeps of its words would pass 2000 bytes" in _log(hub, run_dir)
    s.close()


def test_one_rank_s_progress_never_hides_another_s_hang(run_dir, hub):
    # Before: the watchdog's liveness was any rank's progress: rank 0 stepping kept rank 1's hang alive.
    a = _rank(hub, 0, {"op": "progress", "progress": {"step": 1, "time": 1.0}})
    b = _rank(hub, 1, {"op": "progress", "progress": {"step": 1, "time": 1.0}})
    assert _until(lambda: all(s.progress for s in hub.snapshot().values()))
    time.sleep(0.6)
    for step in range(2, 5):
        a.sendall(hostile._lines({"op": "progress", "progress": {"step": step, "time": float(step)}}))
        time.sleep(0.1)
    assert _until(lambda: hub.snapshot()[0].progress["step"] == 4)
    now = time.time()
    assert execute._silent(hub, now, timeout=0.5)      # rank 1: silent 0.9 s
    assert not execute._silent(hub, now, timeout=5.0)
    b.sendall(hostile._lines({"op": "done", "status": "ok", "report": None}))   # ended: not waited on
    assert _until(lambda: hub.snapshot()[1].status == "ok")
    assert not execute._silent(hub, time.time(), timeout=0.5)
    a.close()
    b.close()
