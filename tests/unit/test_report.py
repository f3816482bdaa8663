"""`bench report` on hand-built records with known times: exact figures, tables, JSON, plots."""

from __future__ import annotations

import json
import os

import pytest

from bench.analysis import paper
from bench.analysis import report_analysis as ra
from bench.core import results
from bench.core.config import RunConfig
from tests.conftest import assert_bad_input, cli

VECTOR = dict(zip(paper.VECTOR_INTRA.gpus, paper.VECTOR_INTRA.seconds))


def point(suite: str, pid: str, gpus: int, epoch_s: float, *, sweep: str | None = None, status: str = "ok",
          labels: dict | None = None, engine: str = "deepspeed", micro_batch: int = 64, parts=None,
          comm: float = 0.05, train_acc: float = 0.5, test_acc: float | None = 0.4) -> dict:
    cfg = RunConfig(micro_batch=micro_batch, engine=engine).to_dict()
    images = 50000  # one CIFAR epoch
    body = {"sweep": sweep or suite, "suite": suite, "point_id": pid, "labels": {"gpus": gpus, **(labels or {})},
            "run_id": f"run-{pid}", "run_dir": f"/nonexistent/{suite}/runs/run-{pid}", "config": cfg,
            "plan": {"world_size": gpus, "nodes": 1, "resources": {"n": list(range(gpus))}, "launcher": "local",
                     "device": "cuda", "command": ["x"]},
            "provenance": {"bench_version": "0", "git_revision": None, "hosts": ["n"], "devices": [],
                           "versions": {"torch": "x", "deepspeed": "x", "timm": "x"}, "env": {}},
            "duration_s": epoch_s}
    if status == "ok":
        step = epoch_s / 100
        body["figures"] = {
            "world_size": gpus, "global_batch": micro_batch * gpus, "images_per_s": images / epoch_s,
            "images_per_s_per_rank": [images / epoch_s / gpus] * gpus,
            "step_s": {"n": 10, "min": step, "median": step, "max": step, "mean": step, "p90": step},
            "parts_s": parts or {"data": step * 0.1, "forward": step * 0.3, "backward": step * 0.5,
                                 "allreduce": step * comm, "optimizer": step * 0.1},
            "comm_share": comm, "comm_share_reason": None, "epoch_s": epoch_s, "warmup": {"steps": 1, "seconds": 1.0},
            "comm": {"bytes_per_step": 2 * 4 * 86e6 * (gpus - 1) / gpus, "seconds_per_step": step * comm},
            "model_states": {"measured": {"total": 16 * 86e6}, "formula": None, "deepspeed_estimate": None},
            "peak_memory_bytes": [2**30] * gpus, "memory_kind": "device",
            "loss": {"first": 2.0, "last": 1.0, "curve": [2.0, 1.0]}, "train_acc": train_acc, "test_acc": test_acc,
            "sanity": {"loss_finite": True, "loss_fell": True, "world_size_as_planned": True}}
    else:
        body["error"] = {"where": "n:0", "reason": "CUDA out of memory" if status == "oom" else "rank died"}
    rec = results.make_record("point", status, **body)
    results.validate(rec)
    return rec


def write(path, recs) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)  # results.append makes no directory
    for r in recs:
        results.append(str(path), r)
    return str(path)


def vector_strong(tmp_path, ns=(1, 2, 4, 8)) -> str:
    recs = [point("strong", f"strong/study/gpus={n}", n, VECTOR[n], labels={"sense": "study"}) for n in ns]
    return write(tmp_path / "results.jsonl", recs)


def test_vector_times_give_the_study_speedup_exactly(tmp_path):
    path = vector_strong(tmp_path)
    proc = cli("report", path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (g,) = doc["groups"]
    (s,) = g["scaling"]
    p8 = next(p for p in s["points"] if p["gpus"] == 8)
    # 1817.65 s on 1 T4, 234.21 s on 8: 7.76x, 97%.
    assert round(p8["speedup"], 2) == 7.76
    assert round(p8["efficiency"], 2) == 0.97
    assert p8["speedup"] == 1817.65 / 234.21
    assert p8["karp_flatt"] == pytest.approx((1 / p8["speedup"] - 1 / 8) / (1 - 1 / 8))
    # The same formula the study's own figures go through.
    ref = {p.gpus: p for p in paper.derive(paper.VECTOR_INTRA)}
    assert p8["speedup"] == ref[8].speedup and p8["efficiency"] == ref[8].efficiency
    assert s["amdahl_serial_fraction"] is not None


def test_printed_tables_show_the_figures(tmp_path):
    proc = cli("report", vector_strong(tmp_path), "--compare-paper")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "7.76x" in out and "97.0%" in out
    assert "strong/study/gpus=8" in out and "234.21 s" in out
    assert "Amdahl fit" in out
    # --compare-paper: the study's vector series beside ours, and its other figures.
    assert "study T (vector-intra)" in out and "1.19x" in out and "29.64x" in out
    assert "4%-11%" in out


def test_weak_efficiency(tmp_path):
    recs = [point("weak", f"weak/gpus={n}", n, t, labels={"sense": "study"})
            for n, t in ((1, 100.0), (2, 110.0), (8, 119.0))]
    doc = json.loads(cli("report", write(tmp_path / "r.jsonl", recs), "--json").stdout)
    (s,) = doc["groups"][0]["scaling"]
    assert s["kind"] == "weak"
    assert [round(p["weak_efficiency"], 4) for p in s["points"]] == [1.0, round(100 / 110, 4), round(100 / 119, 4)]


def test_latest_record_wins_and_failures_are_shown(tmp_path):
    recs = [point("batch", "batch/mb=64/gpus=1", 1, 100.0, labels={"micro_batch": 64}),
            point("batch", "batch/mb=64/gpus=2", 2, 0, status="failed", labels={"micro_batch": 64}),
            point("batch", "batch/mb=64/gpus=2", 2, 61.0, labels={"micro_batch": 64}),
            point("batch", "batch/mb=256/gpus=2", 2, 0, status="oom", labels={"micro_batch": 256})]
    path = write(tmp_path / "r.jsonl", recs)
    doc = json.loads(cli("report", path, "--json").stdout)
    (g,) = doc["groups"]
    # One row per point, the latest record, in the sweep's order within a GPU count.
    assert [(r["id"], r["status"]) for r in g["rows"]] == [("batch/mb=64/gpus=1", "ok"),
                                                            ("batch/mb=64/gpus=2", "ok"),
                                                            ("batch/mb=256/gpus=2", "oom")]
    s64 = next(s for s in g["scaling"] if s["series"] == "batch mb=64")
    assert s64["points"][1]["speedup"] == 100.0 / 61.0
    out = cli("report", path).stdout
    assert "oom" in out and "CUDA out of memory" in out


def test_ddp_and_placement_ratios(tmp_path):
    recs = [point("ddp", "ddp/engine=deepspeed/gpus=2", 2, 50.0, labels={"engine": "deepspeed"}),
            point("ddp", "ddp/engine=ddp/gpus=2", 2, 40.0, labels={"engine": "ddp"}, engine="ddp"),
            point("placement", "placement/packed/gpus=2", 2, 30.0, labels={"placement": "packed"}),
            point("placement", "placement/spread/gpus=2", 2, 60.0, labels={"placement": "spread"})]
    doc = json.loads(cli("report", write(tmp_path / "r.jsonl", recs), "--json").stdout)
    by = {g["suite"]: g for g in doc["groups"]}
    assert by["ddp"]["ratios"][0]["speedup"] == 40.0 / 50.0
    assert by["placement"]["ratios"][0]["speedup"] == 2.0
    ddp_row = next(r for r in by["ddp"]["rows"] if r["engine"] == "ddp")
    # DDP's all-reduce is counted like DeepSpeed's (bench.worker.ddp's Python hook), so it has a share too.
    assert ddp_row["comm_share"] == 0.05 and ddp_row["comm_bytes"] == pytest.approx(4 * 86e6)


def test_runs_shown_once_beside_their_points(tmp_path):
    rec = point("strong", "strong/study/gpus=1", 1, 10.0, labels={"sense": "study"})
    run = {**rec, "kind": "run"}
    for k in ("point_id", "sweep", "suite", "labels"):
        run.pop(k)
    # A run the sweep interrupted, in the sweep's runs/ folder, is no result of it.
    orphan = {**run, "run_id": "run-orphan", "status": "interrupted"}
    write(tmp_path / "results.jsonl", [rec])
    write(tmp_path / "runs" / "x" / "results.jsonl", [run])
    write(tmp_path / "runs" / "y" / "results.jsonl", [orphan])
    # A run of its own elsewhere is shown, as a run.
    alone = {**run, "run_id": "run-alone", "run_dir": "/elsewhere/run-alone"}
    write(tmp_path / "other" / "results.jsonl", [alone])
    doc = json.loads(cli("report", str(tmp_path), "--json").stdout)
    assert len(doc["sources"]) == 4
    assert [(g["sweep"], [r["id"] for r in g["rows"]]) for g in doc["groups"]] == [
        ("strong", ["strong/study/gpus=1"]), ("runs", ["run-alone"])]


def test_torn_line_is_named_and_skipped(tmp_path):
    path = vector_strong(tmp_path, ns=(1, 2))
    with open(path, "a") as f:
        f.write('{"schema_version": 1, "kind": "po')
    proc = cli("report", path, "--json")
    assert proc.returncode == 0
    assert f"{path}:3: torn or invalid line skipped" in proc.stderr
    assert len(json.loads(proc.stdout)["groups"][0]["rows"]) == 2


def _not_results(tmp_path) -> list:
    """Files that are no results file: random bytes, a PNG (one of our own plots), a tar, another program's JSONL."""
    import random
    import tarfile

    noise = tmp_path / "noise.bin"
    noise.write_bytes(random.Random(0).randbytes(20000))  # about 80 newlines: 80 "torn line" notes before
    png = tmp_path / "plot.png"
    recs = [point("strong", f"strong/study/gpus={n}", n, VECTOR[n], labels={"sense": "study"}) for n in (1, 2)]
    proc = cli("report", write(tmp_path / "r.jsonl", recs), "--plots", str(tmp_path / "p"), "--json")
    png.write_bytes(open(json.loads(proc.stdout)["plots"][0], "rb").read())
    tar = tmp_path / "results.tar"
    with tarfile.open(tar, "w") as t:
        t.add(tmp_path / "r.jsonl", arcname="r.jsonl")
        t.add(png, arcname="plot.png")
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n" for i in range(30)))
    return [noise, png, tar, other]


def test_a_file_that_is_no_results_file_is_one_line(tmp_path):
    for path in _not_results(tmp_path):
        for argv in (("report", str(path)), ("compare", str(path), str(path))):
            assert_bad_input(cli(*argv), f"{path} is not a bench results file")


def test_a_results_file_with_many_torn_lines_names_the_first_few_then_counts(tmp_path):
    path = vector_strong(tmp_path, ns=(1, 2))
    with open(path, "a") as f:
        f.write("".join(f"garbage {i}\n" for i in range(12)))
    proc = cli("report", path, "--json")
    assert proc.returncode == 0
    notes = proc.stderr.splitlines()
    assert len(notes) == 6, proc.stderr
    assert notes[0].endswith(f"{path}:3: torn or invalid line skipped (Expecting value)")
    assert notes[-1].endswith(f"{path}: 7 more line(s) skipped")
    assert len(json.loads(proc.stdout)["groups"][0]["rows"]) == 2


def test_unknown_schema_version_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"schema_version": 99, "kind": "run", "status": "ok"}) + "\n")
    assert_bad_input(cli("report", str(path)), f"{path}:1: schema_version 99 is not supported")
    assert_bad_input(cli("report", str(tmp_path / "missing")), "no such file")


def test_plots_are_written(tmp_path):
    recs = [point("strong", f"strong/study/gpus={n}", n, VECTOR[n], labels={"sense": "study"}) for n in (1, 2, 4, 8)]
    recs += [point("batch", f"batch/mb={mb}/gpus={n}", n, 1000.0 / n / (mb ** 0.3), micro_batch=mb,
                   labels={"micro_batch": mb}, train_acc=0.3 + mb / 1000) for n in (1, 2) for mb in (16, 64, 256)]
    path = write(tmp_path / "r.jsonl", recs)
    out = tmp_path / "plots"
    proc = cli("report", path, "--plots", str(out), "--compare-paper", "--json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)["plots"]
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["batch-batch.png", "batch-breakdown.png", "batch-scaling.png",
                     "strong-breakdown.png", "strong-scaling.png"]
    for p in written:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_analysis_needs_t1():
    rows = [ra.row(point("strong", f"strong/study/gpus={n}", n, VECTOR[n], labels={"sense": "study"}))
            for n in (2, 4)]
    s = ra.strong_series("s", rows)
    assert s["note"] and s["amdahl_serial_fraction"] is None
    assert all(p["speedup"] is None for p in s["points"])
