"""bench.launch.exits: the signal that killed a rank, from its node launcher's recorded words (tests/fixtures/exits)."""

from __future__ import annotations

from pathlib import Path

from bench.launch import exits

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "exits"


def test_mpirun_names_the_rank_and_its_signal():
    lines = (FIX / "mpirun-4.1.4_rank1-sigkilled.txt").read_text().splitlines()
    assert exits.parse(lines, [(0, "vm", 11), (1, "vm", 12)]) == {1: "SIGKILL"}


def test_launch_py_with_two_ranks_on_a_node_is_not_taken_at_its_word():
    # It printed rank 1's command with rank 0's return code (1): nothing names a signal, nothing is claimed.
    lines = (FIX / "deepspeed-launch_local-2-ranks_rank1-sigkilled.log").read_text().splitlines()
    assert exits.parse(lines, [(0, "vm", 2593), (1, "vm", 2594)]) == {}
    # Had it printed a signal, two ranks on the node still leave it unsaid which one it was.
    signalled = [line.replace("return code = 1", "return code = -9") for line in lines]
    assert exits.parse(signalled, [(0, "vm", 2593), (1, "vm", 2594)]) == {}


def test_a_signal_number_without_a_name_is_said_as_a_number():
    assert exits.name(9) == "SIGKILL" and exits.name(15) == "SIGTERM" and exits.name(99) == "signal 99"


def test_launch_py_on_a_node_of_one_rank_names_its_signal_through_pdsh():
    # A real 3-host pdsh run (tests/multihost/test_faults.py), rank 1 (node2, PID 4120) SIGKILLed: every line
    # carries pdsh's host prefix, and node 10.77.0.3's launch.py said -9 for the one rank it had spawned.
    lines = (FIX / "deepspeed-launch_pdsh-3-nodes_rank1-sigkilled.log").read_text().splitlines()
    ranks = [(0, "node1", 4123), (1, "node2", 4120), (2, "node3", 4119)]
    assert exits.parse(lines, ranks) == {1: "SIGKILL"}
    assert exits.parse(lines, [(1, "node2", 4999)]) == {}  # a PID it never spawned: not that rank's words
