"""bench.analysis.compare and `bench compare` in-process, on records of the shape real runs write.

Real runs compared (healthy against healthy, and against a run slowed by a
CPU quota) are in tests/multiproc/test_compare_runs.py.
"""

from __future__ import annotations

import itertools
import json

import pytest

from bench.analysis import compare as cmp
from bench.commands.compare import threshold
from bench.core import results
from bench.core.errors import BadInput
from tests.conftest import cli

CFG = {"model": "vit-micro-p4-32", "micro_batch": 16, "zero_stage": 0, "precision": "fp32", "out": "results",
       "timeout": 300.0, "launcher": None, "master_port": None}


_IDS = itertools.count()


def run(ips: float, *, out: str = "results", **cfg) -> dict:
    """A whole run record (the schema's), from tests/unit/test_report.py's point, at ips images/s."""
    from tests.unit.test_report import point

    body = {k: v for k, v in point("batch", "-", 2, 50000 / ips).items()
            if k not in ("schema_version", "kind", "status", "time", "sweep", "suite", "point_id", "labels")}
    body["config"] = {**body["config"], **CFG, "out": out, **cfg}
    body["run_id"] = body["run_dir"] = f"run-{next(_IDS)}"  # repeats are separate runs
    rec = results.make_record("run", "ok", **body)
    results.validate(rec)
    return rec


def write(folder, *recs) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for r in recs:
        results.append(str(folder / "results.jsonl"), r)
    return str(folder)


def test_threshold_parses_percent_and_share():
    assert threshold("5%") == pytest.approx(0.05) and threshold("0.1") == pytest.approx(0.1)
    for bad in ("five", "0", "150%"):
        with pytest.raises(BadInput, match="--threshold"):
            threshold(bad)


def test_a_fall_beyond_threshold_without_repeats_regresses():
    base, new = cmp.samples([run(100.0)]), cmp.samples([run(90.0, out="elsewhere", timeout=60.0)])
    res = cmp.compare(base, new, 0.05)
    (ips,) = [r for r in res.rows if r.figure == "images_per_s"]
    assert ips.change == pytest.approx(-0.10) and ips.spread is None and ips.verdict == "regressed"
    (step,) = [r for r in res.rows if r.figure == "step_s"]
    assert step.verdict == "shown"  # times are shown, never judged


def test_a_fall_within_the_spread_of_repeats_is_not_a_regression():
    base = cmp.samples([run(100.0), run(80.0), run(120.0)])
    new = cmp.samples([run(90.0), run(70.0), run(110.0)])
    (ips,) = [r for r in cmp.compare(base, new, 0.05).rows if r.figure == "images_per_s"]
    assert ips.change == pytest.approx(-0.10)
    # 2 sqrt(20^2/3 + 20^2/3) / 100 = 0.327: a 10% fall is inside what these runs move by themselves
    assert ips.spread == pytest.approx(2 * (2 * 400 / 3) ** 0.5 / 100) and ips.verdict == "same"


def test_different_configs_are_named_not_compared():
    res = cmp.compare(cmp.samples([run(100.0)]), cmp.samples([run(100.0, micro_batch=32)]), 0.05)
    assert res.rows == []
    assert res.incomparable == ["run vit-micro-p4-32 x2: micro_batch 16 vs 32"]


def test_validate_runs_compare_per_node_and_ignore_their_own_runs(tmp_path):
    def validate(ips_b: float) -> dict:
        return results.make_record("validate", "ok", run_id="v", result="PASS", level="quick",
                                   hosts=["n1", "n2"], checks=[],
                                   measured={"node_images_per_s": {"n1": 100.0, "n2": ips_b},
                                             "node_busbw": {"n1": 5e8, "n2": 5e8},
                                             "dp": {"world_size": 2, "images_per_s": 190.0}})
    a = write(tmp_path / "a" / "validate-1", validate(100.0))
    write(tmp_path / "a" / "validate-1" / "runs" / "x", run(1.0))  # the validate run's own solo run
    b = write(tmp_path / "b" / "validate-2", validate(60.0))
    write(tmp_path / "b" / "validate-2" / "runs" / "y", run(999.0))
    records, _ = cmp.load(str(tmp_path / "a"))
    assert [r["kind"] for r in records] == ["validate"]
    res = cmp.compare(cmp.samples(records), cmp.samples(cmp.load(b)[0]), 0.05)
    assert [(r.subject, r.figure) for r in res.regressions] == [("validate quick n2", "images_per_s")]


def test_cli_exit_codes_and_the_line_naming_the_regression(tmp_path):
    a = write(tmp_path / "a", run(100.0), run(101.0))
    same = write(tmp_path / "same", run(99.0), run(100.5))
    slow = write(tmp_path / "slow", run(60.0), run(61.0))
    ok = cli("compare", a, same, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["regressions"] == []
    bad = cli("compare", a, slow)
    assert bad.returncode == 1
    assert "bench compare: regressed: run vit-micro-p4-32 x2: images_per_s -39.8% (threshold 5%, spread 1.4%)" \
        in bad.stderr
    other = write(tmp_path / "other", run(100.0, model="vit-tiny-p4-32"))
    none = cli("compare", a, other)
    assert none.returncode == 2 and none.stderr.count("\n") == 1
    assert "measured nothing alike" in none.stderr
    missing = cli("compare", a, str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
