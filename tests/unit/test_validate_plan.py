"""`bench validate --dry-run` counts what the run will run (issue 47 item 3): the rails, one launch each; DCGM's
diagnostic at its level's documented length; the burn; the second looks; the launcher's own fan-out (srun and
mpirun reach the nodes through a tree, pdsh by one ssh per node from the head)."""

from __future__ import annotations

import pytest

from tests.conftest import cli, one_json

HCAS = ",".join(f"mlx5_{i}" for i in range(8))


@pytest.fixture(scope="module")
def hostfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "hosts1000"
    path.write_text("".join(f"gpu{i:04d}.example.org slots=8\n" for i in range(1000)))
    return path


def _plan(hostfile, *extra: str) -> dict:
    proc = cli("validate", "--hostfile", str(hostfile), "--dry-run", "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return one_json(proc.stdout)


def _stage(p: dict, name: str) -> dict | None:
    return next((s for s in p["stages"] if s["stage"] == name), None)


def test_rails_of_eight_hcas_are_eight_launches_and_without_rails_the_plan_says_what_it_assumed(hostfile):
    without, with_rails = _plan(hostfile), _plan(hostfile, "--rails", HCAS)
    rails = _stage(with_rails, "rails")
    assert rails["launches"] == 8 and rails["looks"] == 8 and "mlx5_7" in rails["how"]
    assert with_rails["predicted_s"] > without["predicted_s"] + 8 * 60, (with_rails["predicted_s"],
                                                                          without["predicted_s"])
    assert _stage(without, "rails") is None
    said = without["assumes"]["rails"]
    assert said.startswith("none counted: without --rails the run measures the Active") and " s each" in said


def test_dcgm_level_2_is_its_documented_two_minutes_more_than_none(hostfile):
    off, two = _plan(hostfile, "--dcgm", "off"), _plan(hostfile, "--dcgm", "2")
    assert _stage(off, "dcgm") is None
    dcgm = _stage(two, "dcgm")
    assert dcgm["level"] == 2 and "about 120 s by NVIDIA's dcgmi reference" in dcgm["how"]
    assert two["predicted_s"] - off["predicted_s"] >= 100
    assert dcgm["timeout_s"] >= 240, "a node's dcgmi may run twice its documented length before it is unknown"
    quick, full = _stage(_plan(hostfile), "dcgm"), _stage(_plan(hostfile, "--level", "full"), "dcgm")
    assert (quick["level"], full["level"]) == (1, 3)


@pytest.mark.parametrize("launcher", ["slurm", "openmpi"])
def test_a_launcher_that_fans_out_through_a_tree_is_planned_shorter_than_pdsh(hostfile, launcher):
    pdsh, tree = _plan(hostfile), _plan(hostfile, "--launcher", launcher)
    assert tree["predicted_s"] < pdsh["predicted_s"] - 4 * 50, (tree["predicted_s"], pdsh["predicted_s"])
    assert _stage(pdsh, "preflight")["predicted_s"] > 60 > 10 > _stage(tree, "preflight")["predicted_s"]
    assert f"{launcher}: the head's share of reaching 1000 nodes" in tree["assumes"]["fanout"]


def test_the_burn_and_the_second_looks_are_counted(hostfile):
    full, unburnt = _plan(hostfile, "--level", "full"), _plan(hostfile, "--level", "full", "--burn", "0")
    assert full["predicted_s"] - unburnt["predicted_s"] == pytest.approx(180, abs=1)
    looks = full["second_looks"]
    # full's per-GPU launch twice more (its repeats, where the first round names a GPU or node), each without the
    # first's numerics, copies and burn; the link launch and the pairs' second look once each.
    assert looks["launches"] == 4 and looks["predicted_s"] > 0
    throughput = _stage(full, "throughput")
    assert throughput["repeats"] == 3 and throughput["second_looks"] == 2 and "Frontera" in throughput["repeats_why"]
    assert throughput["second_look_s"] < throughput["predicted_s"] - 180
    assert full["budget_s"] > full["predicted_s"] + looks["predicted_s"]


def test_the_fanout_of_a_tree_is_its_width_per_level():
    from bench.validate import budget

    assert budget.fanout_s("pdsh", 1000) == pytest.approx(60.0)
    # slurmd's tree of 50: the head reaches 50, each of those 19 more (950 / 50).
    assert budget.fanout_s("slurm", 1000) == pytest.approx((50 + 19) * 0.06)
    assert budget.fanout_s("slurm", 30) == pytest.approx(30 * 0.06)
    assert budget.fanout_s("openmpi", 1000) == pytest.approx((64 + 15) * 0.06)
