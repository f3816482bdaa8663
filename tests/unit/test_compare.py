"""bench.analysis.compare and `bench compare` in-process, on records of the shape real runs write.

Real runs compared (healthy against healthy, and against a run slowed by a
CPU quota) are in tests/multiproc/test_compare_runs.py.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from bench.analysis import compare as cmp
from bench.commands.compare import threshold
from bench.core import results
from bench.core.errors import BadInput
from tests.conftest import REPO, assert_bad_input, cli

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


def crashed(status: str, reason: str, **cfg) -> dict:
    """The record of a run of the same config that measured nothing (failed, oom), as bench.jobs.train writes it."""
    body = {k: v for k, v in run(1.0, **cfg).items() if k not in ("schema_version", "kind", "status", "time",
                                                                 "figures")}
    rec = results.make_record("run", status, **body, error={"where": "rank", "reason": reason, "host": "n1",
                                                           "rank": 0})
    results.validate(rec)
    return rec


def validate_rec(ips: float, status: str = "ok", **identity) -> dict:
    """A validate record as bench validate writes it: its identity, a row per GPU, GPU and link figures."""
    ident = {"level": "quick", "precision": "fp32", "model": "vit-micro-p4-32", "micro_batch": 16, "steps": 10,
             **identity}
    checks = [{"check": "throughput", "node": "n2:0", "status": "FAIL", "value": "", "reference": "", "reason": "",
               "host": "n2", "gpu": 0}] if status != "ok" else []
    return results.make_record("validate", status, run_id="v", result="PASS" if status == "ok" else "FAIL",
                               level="quick", hosts=["n1", "n2"], resources={"n1": [0], "n2": [0]}, checks=checks,
                               identity=ident, measured={"gpu_images_per_s": {"n1:0": 100.0, "n2:0": ips},
                                                         "node_busbw": {"n1": 5e8, "n2": 5e8}})


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
    write(tmp_path / "a" / "validate-1", validate(100.0))
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


def test_a_run_ok_before_and_oom_now_is_a_regression_named_with_its_reason(tmp_path):
    # Before: the oom record was skipped, the subject landed in "only in the baseline", exit 0.
    a = write(tmp_path / "a", run(100.0), run(100.0, micro_batch=512))
    b = write(tmp_path / "b", run(100.0), crashed("oom", "killed by the OOM killer", micro_batch=512))
    res = cli("compare", a, b)
    assert res.returncode == 1, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("bench compare: regressed:")]
    assert line == "bench compare: regressed: run vit-micro-p4-32 x2: ok x1 -> oom: killed by the OOM killer " \
                   "(rank 0 on n1)"
    doc = json.loads(cli("compare", a, b, "--json").stdout)
    assert doc["regressions"] == ["run vit-micro-p4-32 x2: ok x1 -> oom"]


def test_missing_now_is_a_regression_failed_in_both_is_reported_not_counted(tmp_path):
    res = cmp.compare(cmp.samples([run(100.0), run(100.0, micro_batch=64), crashed("failed", "rank died",
                                                                                     micro_batch=8)]),
                      cmp.samples([run(100.0), crashed("failed", "rank died again", micro_batch=8)]), 0.05)
    assert [(x.base, x.new, x.verdict) for x in res.lost] == [("ok x1", "missing", "regressed")]
    both = [x for x in res.outcomes if x.verdict != "regressed"]
    assert [(x.base, x.new, x.reason, x.verdict) for x in both] == [
        ("failed", "failed", "rank died again (rank 0 on n1)", "failed in both")]
    # failed in both only: reported, exit 0
    a = write(tmp_path / "a", run(100.0), crashed("failed", "rank died", micro_batch=8))
    b = write(tmp_path / "b", run(101.0), crashed("failed", "rank died", micro_batch=8))
    out = cli("compare", a, b)
    assert out.returncode == 0, out.stderr
    assert "bench compare: failed in both: run vit-micro-p4-32 x2: failed -> failed: rank died" in out.stderr
    # a crash among repeats is a regression even where the other repeats are fine
    some = cmp.compare(cmp.samples([run(100.0), run(100.0)]),
                       cmp.samples([run(100.0), crashed("failed", "segfault")]), 0.05)
    assert [(x.base, x.new) for x in some.lost] == [("ok x2", "ok x1, failed")]
    recovered = cmp.compare(cmp.samples([crashed("oom", "oom")]), cmp.samples([run(100.0)]), 0.05)
    assert [x.verdict for x in recovered.outcomes] == ["recovered"] and not recovered.lost


def test_a_comm_run_that_died_fails_every_row_it_was_asked_for():
    plan = {"world_size": 2, "nodes": 1, "resources": {"n": [0, 1]}, "launcher": "local", "device": "cpu",
            "command": ["x"]}
    row = {"group": "all", "op": "all_reduce", "ranks": 2, "size": 4096, "bytes": 4096, "iters": 5,
           "time_s": {"min": 1e-4, "median": 1e-4, "max": 1e-4}, "algbw": 4e7, "busbw": 4e7, "wrong": 0}
    ok = results.make_record("comm", "ok", run_id="c", plan=plan, provenance={}, rows=[row],
                             comm={"op": "all_reduce", "sizes": [4096], "groups": [[0, 1]], "group_names": ["all"]})
    died = results.make_record("comm", "failed", run_id="d", plan=plan, provenance={},
                               comm={"op": "all_reduce", "sizes": [4096], "groups": [[0, 1]], "group_names": ["all"]},
                               error={"where": "launcher", "reason": "rank 1 died"})
    res = cmp.compare(cmp.samples([ok]), cmp.samples([died]), 0.05)
    assert [(x.subject, x.new, x.reason) for x in res.lost] == [("comm all_reduce 4096 B x2 all", "failed",
                                                                 "rank 1 died")]


def test_validate_records_of_another_precision_are_refused_naming_the_field(tmp_path):
    # Before: matched by level and host only, an fp32 baseline against a bf16 run was an "improvement".
    a = write(tmp_path / "a" / "validate-1", validate_rec(100.0))
    b = write(tmp_path / "b" / "validate-2", validate_rec(180.0, precision="bf16"))
    res = cli("compare", a, b)
    assert_bad_input(res, "measured 4 subject(s) differently", "precision 'fp32' vs 'bf16'")
    same = write(tmp_path / "c" / "validate-3", validate_rec(60.0))
    worse = cli("compare", a, same)
    assert worse.returncode == 1 and "validate quick n2:0: images_per_s -40.0%" in worse.stderr
    # a validate that FAILed a GPU names its failing check as that GPU's reason
    failed = write(tmp_path / "d" / "validate-4", validate_rec(60.0, status="failed"))
    lost = cli("compare", a, failed)
    assert lost.returncode == 1
    assert "bench compare: regressed: validate quick n2:0: ok x1 -> failed: validate FAIL: throughput" in lost.stderr


def test_a_user_deepspeed_config_is_identified_by_its_content_not_its_path(tmp_path):
    ds = {"deepspeed_config": "/etc/ds.json"}
    a = write(tmp_path / "a", {**run(100.0, **ds), "deepspeed_config_sha256": "a" * 64})
    edited = write(tmp_path / "b", {**run(100.0, **ds), "deepspeed_config_sha256": "b" * 64})
    assert_bad_input(cli("compare", a, edited), "deepspeed_config 'sha256:" + "a" * 64)
    moved = write(tmp_path / "c", {**run(90.0, deepspeed_config="/home/me/ds.json"),
                                   "deepspeed_config_sha256": "a" * 64})
    res = cli("compare", a, moved)
    assert res.returncode == 1 and "images_per_s -10.0%" in res.stderr


def test_breakdown_timers_are_part_of_the_identity(tmp_path):
    # DeepSpeed's wall-clock breakdown synchronises around each part: not the same measurement.
    res = cmp.compare(cmp.samples([run(100.0)]), cmp.samples([run(80.0, breakdown=True)]), 0.05)
    assert res.rows == [] and res.incomparable == ["run vit-micro-p4-32 x2: breakdown False vs True"]


@pytest.mark.process
@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_pipe_keeps_the_exit_status(tmp_path, as_json):
    """`bench compare A B | head` under pipefail: the reader gone, the status is still the verdict's.

    Before: the BrokenPipeError of the table was caught as "exit 0", so a regression piped into head passed.
    """
    a = write(tmp_path / "a", run(100.0), run(101.0))
    slow = write(tmp_path / "slow", run(60.0), run(61.0))
    r, w = os.pipe()
    os.close(r)  # nobody reads: the first write to stdout fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "bench", "compare", a, slow, *(["--json"] if as_json else [])],
                              stdout=w, stderr=subprocess.PIPE, text=True, timeout=120, cwd=REPO)
    finally:
        os.close(w)
    assert proc.returncode == 1, proc.stderr
    assert "bench compare: regressed: run vit-micro-p4-32 x2: images_per_s" in proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
