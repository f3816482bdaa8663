"""Flight-recorder dumps and stack answers recorded from real hung runs (tests/fixtures/hang, SOURCES.md there).

Each folder holds what a real `bench run` left in its run directory when its
watchdog fired: the plan, the ranks' PID files, their answers to the stack
request (stacks/) and their dumps written by torch's own writer (flight/,
torch._C._distributed_c10d._dump_fr_trace, gloo on CPU), and the record's
error as bench wrote it then (error.json). Read back here: each rank's view
of the dumps (bench.launch.flight_dumps), the verdict of the same files
(bench.launch.whereabouts), and torch's analyzer on them (bench.worker.flight).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launch import flight_dumps, whereabouts
from bench.launch.cleanup import rank_pids
from bench.worker import flight, stall

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hang"
REPO = Path(__file__).resolve().parents[2]
CASES = ("zero0-2ranks", "zero3-3ranks")


def _answers(run: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted((run / "stacks").glob("rank*.json"))}


def test_each_rank_s_view_says_which_rank_issued_one_collective_less():
    zero0 = flight_dumps.read(str(FIXTURES / "zero0-2ranks"))["ranks"]
    (g0,), (g1,) = zero0["0"]["groups"].values(), zero0["1"]["groups"].values()
    assert g0["last_enqueued"] == g1["last_enqueued"] + 1  # rank 1 never issued the all-reduce rank 0 waits in
    assert g0["pending"][0]["op"] == "all_reduce" and g0["pending"][0]["seq"] == g0["last_enqueued"]
    assert g0["pending"][0]["issued_at"].startswith("bench/worker/loop.py:")  # the recorder's own Python frames
    assert g1["pending"] == []
    zero3 = flight_dumps.read(str(FIXTURES / "zero3-3ranks"))["ranks"]
    last = {r: v["groups"]["0"]["last_enqueued"] for r, v in zero3.items()}
    assert last["0"] == last["2"] == last["1"] + 1, last


@pytest.mark.parametrize("case", CASES)
def test_the_verdict_of_the_recorded_files_is_the_one_bench_gave(case):
    run = FIXTURES / case
    plan = json.loads((run / "plan.json").read_text())
    recorded = json.loads((run / "error.json").read_text())
    v = whereabouts.verdict(rank_pids(str(run)), _answers(run), {}, {}, flight_dumps.read(str(run)),
                            plan["resources"], plan["device"])
    assert v.reason == recorded["reason"]
    assert v.reason.startswith("hung at step 3: rank 1 on ") and "was in data loading (bench/worker/data.py:" in v.reason
    at = {e["rank"]: e for e in v.ranks_at}
    assert at[1]["odd"] and at[1]["doing"] == "data loading"
    assert "flight recorder shows collective" in at[1]["behind"]
    assert all(at[r]["at"] == "waiting" and not at[r]["odd"] for r in at if r != 1)


def test_a_dump_that_names_a_class_is_refused_not_run(tmp_path):
    (tmp_path / "flight").mkdir()
    (tmp_path / "flight" / "rank0").write_bytes(pickle.dumps({"pg_status": {}, "x": Path("/")}))
    view = flight_dumps.read(str(tmp_path))["ranks"]["0"]
    assert "UnpicklingError" in view["error"] and "pathlib" in view["error"]


def test_the_rank_and_bench_sides_name_the_same_files():
    assert (flight_dumps.DIR, flight_dumps.PREFIX) == (flight.DIR, flight.PREFIX)


def test_the_flight_recorder_is_switched_on_unless_the_user_said_otherwise(tmp_path, monkeypatch):
    for var in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"):
        monkeypatch.delenv(var, raising=False)
    flight.enable(str(tmp_path), torch_version="unknown")
    import os
    # A torch of unknown version gets both names: torch 2.7.1 (the Pascal image) reads only the second, 2.14.1 the first.
    assert os.environ["TORCH_FR_BUFFER_SIZE"] == os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == str(flight.BUFFER_ENTRIES)
    assert os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == os.environ["TORCH_FR_DUMP_TEMP_FILE"] == \
        str(tmp_path / "flight" / "rank")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")
    assert not flight.enabled("2.14.1")


@pytest.mark.process
def test_torch_s_own_analyzer_on_the_recorded_gloo_dumps_says_why_it_cannot_match_them():
    out = subprocess.run([sys.executable, "-m", "bench.worker.flight", str(FIXTURES / "zero0-2ranks" / "flight")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)  # stdout holds the one JSON document, whatever the analyzer printed
    assert verdict["ok"] is False and verdict["error"].startswith("KeyError")
    assert "pg_config is named ''" in verdict["error"]


def test_a_rank_s_answer_holds_its_position_and_every_thread_s_stack(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")  # no recorder in this process: said so in the answer
    from bench.worker.position import POSITION

    seq = POSITION.enter("all_reduce")
    try:
        import threading
        t = threading.Thread(target=stall.answer, args=(str(tmp_path), 3, "nodeX", "req-1"), name="watcher")
        t.start()
        t.join(30)
    finally:
        POSITION.leave(seq)
    said = json.loads((tmp_path / "stacks" / "rank3.json").read_text())
    assert (said["request"], said["rank"], said["host"]) == ("req-1", 3, "nodeX")
    assert {"seq": seq, "op": "all_reduce"}.items() <= said["position"]["in_flight"][0].items()
    main = [s for s in said["threads"] if s["main"]]
    assert len(main) == 1  # waiting in join(), under this test
    assert "test_a_rank_s_answer_holds_its_position_and_every_thread_s_stack" in [f["function"] for f in main[0]["frames"]]
    assert all(not f["file"].startswith("/") or Path(f["file"]).exists() for f in main[0]["frames"]), main
    assert not any(s["thread"] == "watcher" for s in said["threads"])  # the answering thread leaves itself out
    assert said["flight_recorder"]["path"] is None and "flight recorder is off" in said["flight_recorder"]["reason"]
