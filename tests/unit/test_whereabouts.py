"""bench.launch.whereabouts: from each rank's answer (or report, or silence) to `ranks_at` and the failure line.

The answers here are in the shape bench.worker.stall writes them (a test of the
whole path on real ranks is tests/multihost/test_hangs.py; recorded answers and
flight-recorder dumps of a real hung run are in test_flight_recorder.py).
"""

from __future__ import annotations

from pathlib import Path

from bench.launch import whereabouts

RES = {"10.0.0.2": [0], "10.0.0.3": [0], "10.0.0.4": [0]}
RANKS = [(0, "node1", 100), (1, "node2", 200), (2, "node3", 300)]


def waiting(seq: int, step: int = 7, op: str = "all_reduce") -> dict:
    return {"position": {"step": step, "seq": seq, "in_flight": [{"seq": seq, "op": op, "step": step, "for_s": 9.5}]},
            "threads": [{"thread": "MainThread", "main": True, "frames": [
                {"file": "bench/worker/loop.py", "line": 88, "function": "train", "code": "engine.backward(loss)"},
                {"file": "bench/worker/comm_counter.py", "line": 150, "function": "counted", "code": "work = ..."}]}]}


def outside(file: str, line: int, code: str, step: int = 7, seq: int = 40, function: str = "epoch") -> dict:
    return {"position": {"step": step, "seq": seq, "in_flight": []},
            "threads": [{"thread": "bench-orphan-guard", "main": False, "frames": [
                {"file": "bench/core/heartbeat.py", "line": 1, "function": "loop", "code": ""}]},
                {"thread": "MainThread", "main": True, "frames": [
                    {"file": "bench/worker/loop.py", "line": 81, "function": "train", "code": "_, x, y = next(stream)"},
                    {"file": file, "line": line, "function": function, "code": code},
                    {"file": "/site/sitecustomize.py", "line": 19, "function": "crop_flip", "code": "time.sleep(3600)"}]}]}


def verdict(answers, reports=None, cleanup=None, flight=None, device="cpu", states=None, ranks=RANKS, res=RES):
    return whereabouts.verdict(ranks, answers, reports or {}, cleanup or {}, flight, res, device, states)


def test_a_rank_in_data_loading_is_named_first_with_bench_s_innermost_frame():
    v = verdict({0: waiting(41), 1: outside("bench/worker/data.py", 171, "x = crop_flip(...)"), 2: waiting(41)})
    assert v.reason == ("hung at step 7: rank 1 on node2 was in data loading (bench/worker/data.py:171); "
                        "2 ranks waited in all_reduce #41")
    assert [e["rank"] for e in v.odd] == [1] and v.waited == {"op": "all_reduce", "seq": 41, "ranks": 2}
    at = {e["rank"]: e for e in v.ranks_at}
    assert at[1]["at"] == "outside" and at[1]["doing"] == "data loading" and at[1]["frame"] == "bench/worker/data.py:171"
    assert at[0]["at"] == "waiting" and at[0]["collective"] == {"op": "all_reduce", "seq": 41} and not at[0]["odd"]
    assert at[0]["frame"] == "bench/worker/loop.py:88"  # the counter's own frame is plumbing, not where


def test_a_rank_behind_at_an_earlier_collective_is_odd():
    v = verdict({0: waiting(41), 1: waiting(40, op="all_gather"), 2: waiting(41)})
    assert v.reason == ("hung at step 7: rank 1 on node2 was in all_gather #40, behind the others (#41); "
                        "2 ranks waited in all_reduce #41")


def test_outside_any_collective_without_a_known_activity_shows_the_line():
    v = verdict({0: waiting(41), 1: outside("bench/worker/main.py", 120, "rec = rank_record(...)", function="run"),
                 2: waiting(41)})
    assert "rank 1 on node2 was outside any collective (bench/worker/main.py:120: rec = rank_record(...))" in v.reason


def test_a_stopped_rank_that_did_not_answer_is_named_by_its_process_state():
    v = verdict({0: waiting(41), 2: waiting(41)}, cleanup={"killed": {"10.0.0.3": [200]},
                                                          "states": {"10.0.0.3": {"200": "T (stopped)"}}})
    assert v.reason.startswith("hung at step 7: rank 1 on node2 did not answer: its process was stopped "
                               "(state T: SIGSTOP, or a debugger); 2 ranks waited in all_reduce #41")
    assert {e["rank"]: e for e in v.ranks_at}[1]["process_state"] == "T (stopped)"


def test_a_stopped_rank_is_named_before_a_neighbour_still_finishing_the_collective_it_stopped_in():
    """A CI run (strict FUSE profile, 3 hosts): rank 1 SIGSTOPped; rank 2 had passed all_reduce #59 and waited in
    #60, rank 0 still waited in #59 for rank 1's last chunk (a ring lets one rank finish before another). Rank 0
    answered from inside a collective, so it waits on someone; the stopped process is the cause and comes first."""
    v = verdict({0: waiting(59, step=2), 2: waiting(60, step=2)},
                cleanup={"states": {"10.0.0.3": {"200": "T (stopped)"}}})
    assert [e["rank"] for e in v.odd] == [1, 0]
    assert v.reason.startswith("hung at step 2: rank 1 on node2 did not answer: its process was stopped (state T: "
                               "SIGSTOP, or a debugger); rank 0 on node1 was in all_reduce #59, behind the others "
                               "(#60); 1 rank waited in all_reduce #60"), v.reason


def test_ranks_that_ended_by_their_own_timeout_count_as_waiting_in_the_collective_that_failed():
    failed = {"status": "failed", "error": "DistBackendError: Timed out",
              "at": {"step": 7, "seq": 41, "in_flight": [], "failed": {"seq": 41, "op": "all_reduce", "step": 7,
                                                                      "after_s": 30.0, "error": "Timed out"}}}
    v = verdict({1: outside("bench/worker/data.py", 171, "x = crop_flip(...)")}, reports={0: failed, 2: failed})
    assert v.reason.endswith("2 ranks waited in all_reduce #41")
    assert {e["source"] for e in v.ranks_at if not e["odd"]} == {"report"}


def test_every_rank_in_one_collective_names_the_host_that_stopped_answering():
    v = verdict({0: waiting(41), 1: waiting(41), 2: waiting(41)},
                cleanup={"unreachable": {"10.0.0.4": "ssh: connect timed out"}})
    assert v.reason == ("hung at step 7: rank 2 on node3: its host stopped answering (ssh: connect timed out), while "
                        "waiting in all_reduce #41 too; every rank (3) waited in all_reduce #41")
    assert [e["rank"] for e in v.odd] == [2]


def failed_in(seq: int, step: int) -> dict:
    return {"status": "failed", "error": "DistBackendError: Timed out",
            "at": {"step": step, "seq": seq, "in_flight": [], "failed": {"seq": seq, "op": "all_reduce", "step": step,
                                                                        "after_s": 10.0, "error": "Timed out"}}}


def test_a_cut_host_s_rank_one_collective_behind_is_named_first_and_the_others_set_the_step():
    # As CI recorded it: the link cut inside a ring all-reduce; the two ranks that kept theirs had what they
    # needed and went on to the next step's all_reduce, the cut host's rank never got its last message.
    v = verdict({}, reports={0: failed_in(105, 25), 1: failed_in(104, 24), 2: failed_in(105, 25)},
                cleanup={"unreachable": {"10.0.0.3": "ssh: connect timed out"}})
    assert v.reason == ("hung at step 25: rank 1 on node2: its host stopped answering (ssh: connect timed out); "
                        "it was in all_reduce #104, behind the others (#105); 2 ranks waited in all_reduce #105")
    assert [e["rank"] for e in v.odd] == [1] and v.step == 25


def test_a_cut_host_s_rank_one_collective_ahead_is_named_first_too():
    v = verdict({}, reports={0: failed_in(104, 24), 1: failed_in(105, 25), 2: failed_in(104, 24)},
                cleanup={"unreachable": {"10.0.0.3": "ssh: connect timed out"}})
    assert v.reason == ("hung at step 24: rank 1 on node2: its host stopped answering (ssh: connect timed out); "
                        "it was in all_reduce #105; 2 ranks waited in all_reduce #104")


def test_every_rank_in_one_collective_and_nothing_else_known_names_nobody():
    v = verdict({0: waiting(41), 1: waiting(41), 2: waiting(41)})
    assert v.odd == []
    assert v.reason.endswith("every rank (3) waited in all_reduce #41: no rank stands out (a link between them, or "
                             "something outside this run)")


def test_on_gpus_the_flight_recorder_s_pending_collective_replaces_the_host_s_outside():
    # A NCCL rank's host thread left the all-reduce long ago (it syncs in .tolist()); its stream never finished it.
    host_outside = outside("bench/worker/loop.py", 104, "loss_sum, correct = torch.stack([...]).tolist()",
                           function="train")
    flight = {"ranks": {str(r): {"groups": {"0": {"desc": "default_pg", "last_enqueued": 9, "last_completed": 8,
                                                  "pending": [{"seq": 9, "op": "all_reduce", "state": "started"}]}}}
                        for r in (0, 2)} | {"1": {"groups": {"0": {"desc": "default_pg", "last_enqueued": 8,
                                                                   "last_completed": 8, "pending": []}}}}}
    v = verdict({0: host_outside, 1: outside("bench/worker/data.py", 171, "x = crop_flip(...)"), 2: host_outside},
                flight=flight, device="cuda")
    assert v.reason == ("hung at step 7: rank 1 on node2 was in data loading (bench/worker/data.py:171); 2 ranks "
                        "waited in all_reduce #9")
    at = {e["rank"]: e for e in v.ranks_at}
    assert at[0]["source"] == "flight recorder" and at[0]["device_state"] == "started"
    assert "last, the others' #9" in at[1]["behind"]
    # On CPU the host's view stands: the same answers say every rank was outside a collective.
    assert verdict({0: host_outside, 1: host_outside, 2: host_outside}, flight=flight).waited is None


def test_plan_host_follows_the_hostfile_slot_by_slot():
    res = {"a": [0, 1], "b": [0], "c": [0, 1, 2]}
    assert [whereabouts.plan_host(r, res) for r in range(7)] == ["a", "a", "b", "c", "c", "c", None]


def test_the_training_loop_still_holds_the_lines_its_labels_name():
    loop = (Path(__file__).resolve().parents[2] / "bench" / "worker" / "loop.py").read_text()
    for text in whereabouts.LOOP_LINES:
        assert text in loop, text
