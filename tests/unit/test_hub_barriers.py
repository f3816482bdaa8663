"""Barriers belong to bench's plan (issue 52): their names, counts and who counts come from plan.json, a rank that
enters another is refused for itself alone, and no rank's junk drops a real rank or releases a barrier early. Over
real loopback TCP against a real Hub; the ranks are real phones, the forger tests/hostile.py's client."""

from __future__ import annotations

import time

import pytest

from bench.core.conversation import barriers as barriers_mod
from bench.core.conversation.hub import Hub
from bench.core.conversation.phone import Phone
from bench.core.conversation.planned import COPY_KINDS, COPY_TURNS, copies_names, planned
from tests import hostile


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "logs").mkdir()
    return tmp_path


_until = hostile.until


_log = hostile.hub_log


def _phone(run_dir, rank: int) -> Phone:
    p = Phone.dial(str(run_dir), rank, f"node{rank}")
    p.listen(lambda why: None, None)
    return p


def test_a_forged_per_rank_false_does_not_release_a_planned_barrier(run_dir):
    # Before: the first to enter set per_rank; a forger's False made the count 1 and released rank 1 in 0.001 s.
    with Hub.open(str(run_dir), world=3, beat_s=0.2, barriers={"gpus-3": True}) as hub:
        forger = hostile.as_rank(hub.addr, hub.port, hub.token, 2, "node2",
                                 {"op": "enter", "barrier": "gpus-3", "per_rank": False})
        real = _phone(run_dir, 1)
        time.sleep(0.2)
        assert real.enter("gpus-3", 0.6, True)[1] is None, "rank 0 never entered: no release"
        zero = _phone(run_dir, 0)
        assert zero.enter("gpus-3", 5, True)[1] == "all in"
        assert _until(lambda: real._go.get("gpus-3") == "all in")
        forger.close()


def test_another_rank_cannot_make_rank_0_s_run_barrier_per_rank(run_dir):
    # Before: rank 1 entering "steps" per rank first made rank 0 wait its whole timeout for a world that never came.
    with Hub.open(str(run_dir), world=2, beat_s=0.2, barriers={"steps": False}) as hub:
        hostile.as_rank(hub.addr, hub.port, hub.token, 1, "node1",
                        {"op": "enter", "barrier": "steps", "per_rank": True}).close()
        waited, why = _phone(run_dir, 0).enter("steps", 5, False)
        assert why == "all in" and waited < 2


def test_64_junk_barriers_are_refused_to_their_rank_and_drop_no_real_rank(run_dir):
    # Before: 64 junk names from one rank filled MAX_BARRIERS; the next real rank was dropped ("over 64 barriers").
    with Hub.open(str(run_dir), world=2, beat_s=0.2, barriers={"steps": True}) as hub:
        junk = hostile.as_rank(hub.addr, hub.port, hub.token, 1, "node1",
                               *({"op": "enter", "barrier": f"junk-{i}", "per_rank": True} for i in range(64)))
        time.sleep(0.5)
        real = _phone(run_dir, 0)
        assert real.enter("steps", 0.5, True)[1] is None   # waits for rank 1, which is still a rank of the launch
        junk.sendall(hostile._lines({"op": "enter", "barrier": "steps", "per_rank": True}))
        assert _until(lambda: real._go.get("steps") == "all in")
        assert hub.snapshot()[0].status is None and hub.snapshot()[1].status is None
        assert list(hub.barriers.all) == ["steps"]
        log = _log(hub, run_dir)
        assert "rank 1: refused: barrier 'junk-0' is not in bench's plan" in log and "dropped" not in log, log


def test_without_a_plan_one_rank_s_junk_leaves_room_for_the_others(run_dir):
    with Hub.open(str(run_dir), world=2, beat_s=0.2) as hub:
        junk = hostile.as_rank(hub.addr, hub.port, hub.token, 1, "node1",
                               *({"op": "enter", "barrier": f"junk-{i}", "per_rank": False} for i in range(64)))
        time.sleep(0.5)
        real = _phone(run_dir, 0)
        assert real.enter("steps", 0.3, True)[1] is None and hub.snapshot()[0].status is None
        assert len(hub.barriers.all) == barriers_mod.RANK_SHARE + 1
        assert all(b.per_rank for b in hub.barriers.all.values()), "per rank, whatever the rank said"
        junk.close()


def test_a_rank_that_enters_a_barrier_the_plan_lacks_is_told_at_once_and_goes_on(run_dir):
    with Hub.open(str(run_dir), world=2, beat_s=0.2, barriers={"steps": True}) as hub:
        waited, why = _phone(run_dir, 0).enter("not-planned", 5, True)
        assert why.startswith("refused: barrier 'not-planned' is not in bench's plan") and waited < 2
        assert hub.barriers.all["steps"].entered == set() and hub.snapshot()[0].status is None


def test_the_plan_s_barriers_are_the_ones_the_ranks_enter():
    from bench.worker import copies, gpu_copies
    assert (COPY_TURNS, COPY_KINDS) == (copies.CPU_TURNS, gpu_copies.KINDS)
    validate = {"independent": True, "start_barrier": {"name": "gpus-3", "count": 8, "timeout_s": 60},
                "numerics": {"spec": {}, "barrier": {"name": "gpus-numerics-3", "count": 8, "timeout_s": 60}},
                "copies": {"barrier": {"name": "gpus-copies-3", "count": 8, "timeout_s": 60}},
                "burn": {"seconds": 5, "barrier": {"name": "gpus-burn-3", "count": 8, "timeout_s": 60}}}
    got = planned(validate)
    assert got == {"gpus-3": True, "gpus-numerics-3": True, "gpus-burn-3": True,
                   **dict.fromkeys(copies_names("gpus-copies-3"), True)}
    assert copies_names("c") == ["c-alone", "c-alone2", "c-together", "c-together-h2d", "c-together-d2h",
                                 "c-together-both", "c-together-d2d"]
    assert planned({"start_barrier": {"name": "steps"}}) == {"steps": False}   # rank 0 enters for its run
    assert planned({}) == {} and planned({"copies": {"barrier": 3}, "burn": "x"}) == {}
