"""bench.launch.exits: the signal that killed a rank, from its launcher's words (mpirun's recorded in tests/fixtures/exits)."""

from __future__ import annotations

from pathlib import Path

from bench.launch import exits

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "exits"


def test_mpirun_names_the_rank_and_its_signal():
    lines = (FIX / "mpirun-4.1.4_rank1-sigkilled.txt").read_text().splitlines()
    assert exits.parse(lines, [(0, "vm", 11), (1, "vm", 12)]) == {1: "SIGKILL"}


def test_a_signal_number_without_a_name_is_said_as_a_number():
    assert exits.name(9) == "SIGKILL" and exits.name(15) == "SIGTERM" and exits.name(99) == "signal 99"


def test_the_node_launchers_line_names_the_rank_through_pdsh():
    # bench.launch.node's words behind pdsh's host prefix (tests/unit/test_node_launcher.py runs it for real);
    # a rank it stopped itself is not said to have ended by a signal, its peer's failure is the cause.
    lines = ["10.77.0.3: [bench.launch.node] rank 1 pid 4120 ended by SIGKILL",
             "10.77.0.3: [bench.launch.node] rank 2 pid 4121 stopped by this launcher (after rank 1 failed): "
             "ended by SIGTERM",
             "10.77.0.2: [bench.launch.node] rank 0 pid 4119 exited with 1"]
    ranks = [(0, "node1", 4119), (1, "node2", 4120), (2, "node2", 4121)]
    assert exits.parse(lines, ranks) == {1: "SIGKILL"}
    assert exits.parse(lines, [(1, "node2", 4999)]) == {}  # another PID recorded for that rank: not its line
