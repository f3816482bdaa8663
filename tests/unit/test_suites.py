"""Suites are pure: (base config, options, pool) -> points. Planning only; nothing launches."""

from __future__ import annotations

import pytest

from bench.cluster import hostfile
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.experiments.suites import Pool, SuiteOptions, plan, powers_of_two

LOCAL2 = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cpu")
BASE = RunConfig(model="vit-micro-p4-32", dataset="synthetic", micro_batch=16, steps=6, timing_warmup=2)


def ids(points):
    return [p.id for p in points]


def hostpool(text: str, device: str = "cuda") -> Pool:
    res = hostfile.resolve_resources(hostfile.parse_hostfile_text(text, "test"))
    return Pool(resources=res, hostfile=True, device=device)


def test_batch_defaults_to_study_sizes_at_1_and_n():
    pts = plan("batch", BASE, SuiteOptions(), LOCAL2)
    assert ids(pts) == [f"batch/mb={mb}/gpus={n}" for n in (1, 2) for mb in (16, 32, 64, 128, 256)]
    p = pts[-1]
    assert p.config.micro_batch == 256 and p.config.gpus == 2 and p.include is None
    assert p.labels == {"micro_batch": 256, "gpus": 2}
    # Everything else is the base config's.
    assert p.config.replace(micro_batch=16, gpus=None) == BASE


def test_batch_values_and_counts():
    pts = plan("batch", BASE, SuiteOptions(values=("8", "16"), gpu_counts=(2,)), LOCAL2)
    assert ids(pts) == ["batch/mb=8/gpus=2", "batch/mb=16/gpus=2"]


@pytest.mark.parametrize("opts,needle", [
    (SuiteOptions(micro_batches=("0",)), "--micro-batches: '0' is not a whole number"),
    (SuiteOptions(micro_batches=("x",)), "--micro-batches: 'x' is not a whole number"),
    (SuiteOptions(grad_accums=("2",)), "--grad-accums: the batch suite does not take it"),
    (SuiteOptions(gpu_counts=(4,)), "--gpu-counts: 4 asked but the pool has 2"),
])
def test_batch_bad_options(opts, needle):
    with pytest.raises(BadInput, match=needle):
        plan("batch", BASE, opts, LOCAL2)


def test_accum_fixes_micro_batch():
    pts = plan("accum", BASE, SuiteOptions(), LOCAL2)
    assert ids(pts) == [f"accum/accum={a}/gpus=2" for a in (1, 2, 4, 8)]
    assert {p.config.micro_batch for p in pts} == {16}
    assert [p.config.grad_accum for p in pts] == [1, 2, 4, 8]


def test_powers_of_two():
    assert powers_of_two(1) == [1]
    assert powers_of_two(2) == [1, 2]
    assert powers_of_two(8) == [1, 2, 4, 8]
    assert powers_of_two(6) == [1, 2, 4, 6]


def test_strong_both_senses_labelled():
    pool = Pool(resources={"localhost": list(range(4))}, hostfile=False)
    pts = plan("strong", BASE, SuiteOptions(), pool)
    assert ids(pts) == ["strong/fixed-global/gpus=1", "strong/fixed-global/gpus=2", "strong/fixed-global/gpus=4",
                        "strong/study/gpus=1", "strong/study/gpus=2", "strong/study/gpus=4"]
    fixed = [p for p in pts if p.labels["sense"] == "fixed-global"]
    # Textbook: the global batch (16 x 4 = 64) is fixed, the micro batch shrinks.
    assert [p.config.micro_batch for p in fixed] == [64, 32, 16]
    assert {p.config.micro_batch * p.gpus for p in fixed} == {64}
    study = [p for p in pts if p.labels["sense"] == "study"]
    assert {p.config.micro_batch for p in study} == {16}
    assert {p.config.dataset_fraction for p in pts} == {1.0}


def test_strong_global_batch_must_split():
    pool = Pool(resources={"localhost": list(range(3))}, hostfile=False)
    with pytest.raises(BadInput, match="--global-batch: 64 does not split evenly over 3 GPUs"):
        plan("strong", BASE, SuiteOptions(global_batch=64), pool)
    pts = plan("strong", BASE, SuiteOptions(senses=("study",)), pool)
    assert ids(pts) == ["strong/study/gpus=1", "strong/study/gpus=2", "strong/study/gpus=3"]
    with pytest.raises(BadInput, match="--senses"):
        plan("strong", BASE, SuiteOptions(senses=("nope",)), pool)


def test_weak_share_grows_with_gpus():
    pool = Pool(resources={"localhost": list(range(8))}, hostfile=False)
    pts = plan("weak", BASE, SuiteOptions(), pool)
    assert ids(pts) == ["weak/gpus=1", "weak/gpus=2", "weak/gpus=4", "weak/gpus=8"]
    # The study's 10% per GPU.
    assert [p.config.dataset_fraction for p in pts] == [0.1, 0.2, 0.4, 0.8]
    # 16 GPUs at 10% each would need 160% of the data: the share shrinks to fit.
    big = Pool(resources={"localhost": list(range(16))}, hostfile=False)
    assert plan("weak", BASE, SuiteOptions(), big)[-1].config.dataset_fraction == 1.0
    with pytest.raises(BadInput, match="--base-fraction"):
        plan("weak", BASE, SuiteOptions(base_fraction=0.3), pool)


def test_hostfile_points_use_include_specs():
    pool = hostpool("a slots=2\nb slots=2\nc slots=2\n")
    pts = plan("strong", BASE, SuiteOptions(senses=("study",)), pool)
    assert [(p.id, p.include) for p in pts] == [
        ("strong/study/gpus=1", "a:0"), ("strong/study/gpus=2", "a:0,1"),
        ("strong/study/gpus=4", "a:0,1@b:0,1"), ("strong/study/gpus=6", "a:0,1@b:0,1@c:0,1")]
    # --gpus would clash with --include in `bench run`.
    assert {p.config.gpus for p in pts} == {None}
    # One-host points of a cluster run on that host, not locally on this machine.
    assert {p.config.launcher for p in pts} == {"pdsh"}
    opts = SuiteOptions(senses=("study",))
    assert {p.config.launcher for p in plan("strong", BASE.replace(launcher="openmpi"), opts, pool)} == {"openmpi"}
    assert {p.config.launcher for p in plan("strong", BASE, opts, hostpool("a slots=2\n"))} == {None}


def test_placement_packed_vs_spread():
    pool = hostpool("n1 slots=4\nn2 slots=4\nn3 slots=1\n")
    pts = plan("placement", BASE, SuiteOptions(), pool)
    assert [(p.id, p.include) for p in pts] == [
        ("placement/one/gpus=1", "n1:0"),  # T1 of both placements' efficiency
        ("placement/packed/gpus=3", "n1:0,1,2"), ("placement/spread/gpus=3", "n1:0@n2:0@n3:0")]
    pts = plan("placement", BASE, SuiteOptions(gpu_counts=(2,)), pool)
    assert [p.include for p in pts] == ["n1:0", "n1:0,1", "n1:0@n2:0"]
    assert [p.labels["placement"] for p in pts] == ["one", "packed", "spread"]
    with pytest.raises(BadInput, match="--gpu-counts: 4 GPUs one per node needs 4 hosts"):
        plan("placement", BASE, SuiteOptions(gpu_counts=(4,)), pool)


def test_placement_needs_two_hosts():
    with pytest.raises(BadInput, match="placement: needs a --hostfile that selects >= 2 hosts"):
        plan("placement", BASE, SuiteOptions(), LOCAL2)
    with pytest.raises(BadInput, match=">= 2 hosts"):
        plan("placement", BASE, SuiteOptions(), hostpool("only slots=8\n"))
    with pytest.raises(BadInput, match="no host has >= 2 slots"):
        plan("placement", BASE, SuiteOptions(), hostpool("a slots=1\nb slots=1\n"))


def test_zero_cpu_precisions_and_variants():
    pts = plan("zero", BASE, SuiteOptions(), LOCAL2)
    assert len(pts) == 12
    assert {p.id for p in pts if p.config.engine == "fsdp2"} == {"zero/fsdp2/fp32/gpus=2", "zero/fsdp2/bf16/gpus=2"}
    assert {p.config.precision for p in pts} == {"fp32", "bf16"}
    off = [p for p in pts if p.config.offload]
    assert {p.config.zero_stage for p in off} == {2}
    assert "zero/stage=2+offload/bf16/gpus=2" in ids(pts)
    gpu = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cuda")
    on_gpu = plan("zero", BASE, SuiteOptions(), gpu)
    assert {p.config.precision for p in on_gpu} == {"fp32", "fp16", "bf16"}
    assert "zero/fsdp2/fp16/gpus=2" not in ids(on_gpu)  # FSDP2 runs fp32 and bf16
    with pytest.raises(BadInput, match="--precisions: fp16 needs a GPU"):
        plan("zero", BASE, SuiteOptions(precisions=("fp16",)), LOCAL2)
    with pytest.raises(BadInput, match="unknown ZeRO variant '0\\+offload'"):
        plan("zero", BASE, SuiteOptions(values=("0+offload",)), LOCAL2)
    assert ids(plan("zero", BASE, SuiteOptions(values=("1+offload",), precisions=("fp32",)), LOCAL2)) == [
        "zero/stage=1+offload/fp32/gpus=2"]


def test_ddp_pairs_engines():
    pts = plan("ddp", BASE, SuiteOptions(), LOCAL2)
    assert [(p.id, p.config.engine) for p in pts] == [("ddp/engine=deepspeed/gpus=2", "deepspeed"),
                                                      ("ddp/engine=ddp/gpus=2", "ddp"),
                                                      ("ddp/engine=fsdp2/gpus=2", "fsdp2")]
    with pytest.raises(BadInput, match="ddp: compares fp32 ZeRO-0"):
        plan("ddp", BASE.replace(precision="bf16"), SuiteOptions(), LOCAL2)


def test_paper_is_the_study_recipe():
    pool = hostpool("".join(f"v{i} slots=8\n" for i in range(4)))
    pts = plan("paper", BASE, SuiteOptions(), pool)
    c = pts[0].config
    assert (c.model, c.lr, c.epochs, c.steps, c.precision, c.zero_stage) == ("vit-b16-224", 1e-4, 5.0, None,
                                                                           "fp32", 0)
    packed = [p for p in pts if p.labels["placement"] == "packed"]
    # The study's counts (1..8 intra, 1..32 inter) that a 32-slot pool has.
    assert sorted({p.gpus for p in packed}) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]
    assert {p.config.micro_batch for p in pts} == {16, 64}
    spread = [p for p in pts if p.labels["placement"] == "spread"]
    assert [p.id for p in spread if p.config.micro_batch == 64] == ["paper/spread/mb=64/gpus=2",
                                                                     "paper/spread/mb=64/gpus=4"]
    assert spread[1].include == "v0:0@v1:0@v2:0@v3:0"
    # On this node: the counts it has.
    assert ids(plan("paper", BASE, SuiteOptions(), LOCAL2)) == ["paper/mb=16/gpus=1", "paper/mb=16/gpus=2",
                                                                "paper/mb=64/gpus=1", "paper/mb=64/gpus=2"]


def test_ids_are_stable_and_unique():
    a = plan("zero", BASE, SuiteOptions(), LOCAL2)
    b = plan("zero", BASE, SuiteOptions(), LOCAL2)
    assert ids(a) == ids(b) and len(set(ids(a))) == len(a)
    assert [p.to_dict() for p in a] == [p.to_dict() for p in b]


def test_unknown_suite():
    with pytest.raises(BadInput, match="unknown suite 'nope'"):
        plan("nope", BASE, SuiteOptions(), LOCAL2)


# --- the sweep loop: which points run, which are skipped, what is recorded ------------------------
# A GPU out-of-memory cannot happen here, so `run_one` stands in for `bench run` and returns the
# records it would (their shape is the one tests/multiproc/test_sweep.py gets from real runs).

def _fake_runner(outcomes: dict[int, str], calls: list):
    from bench.core import results
    from tests.unit.test_report import point

    def run_one(cfg, hosts, mode):
        from bench.core.errors import NoRoom

        assert mode.quiet  # a sweep's points print no notes of their own: its progress does
        out_dir = mode.out_dir
        calls.append(cfg.micro_batch)
        status = outcomes.get(cfg.micro_batch, "ok")
        if status == "no room":  # what bench.jobs.train.run raises when --out filled up (storage.check_room)
            raise NoRoom(f"--out: {out_dir} has 0 KiB free; ...", out_dir, 0)
        # A whole run record as the schema wants it (bench reads back only records that match).
        rec = point("batch", "-", cfg.gpus, 1.0, status=status, micro_batch=cfg.micro_batch)
        body = {k: v for k, v in rec.items()
                if k not in ("schema_version", "kind", "status", "time", "sweep", "suite", "point_id", "labels")}
        body.update(run_id=f"r{len(calls)}", run_dir=out_dir, config=cfg.to_dict())
        if status == "ok":
            body["figures"]["images_per_s"] = 10.0 * cfg.micro_batch
        elif status == "interrupted":
            del body["error"]
        else:
            body["error"] = {"where": "localhost:0", "reason": "CUDA out of memory" if status == "oom" else "died"}
        return results.make_record("run", status, **body)
    return run_one


def _sweep(tmp_path, outcomes, calls, values=("16", "64", "256")):
    from bench.cluster.hostfile import HostSelection
    from bench.experiments import sweep
    from bench.render.progress import SweepProgress

    pts = plan("batch", BASE, SuiteOptions(values=values, gpu_counts=(2,)), LOCAL2)
    d = str(tmp_path / "batch")
    done = sweep.open_sweep(d, "batch", BASE, SuiteOptions(values=values), LOCAL2, pts)
    rc = sweep.run_points(pts, HostSelection(), d, done, run_one=_fake_runner(outcomes, calls),
                          view=SweepProgress("batch"), as_json=True)
    return rc, d


def test_oom_point_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    import json

    from bench.core import results

    calls: list = []
    rc, d = _sweep(tmp_path, {64: "oom"}, calls)
    assert rc == 0 and calls == [16, 64, 256]
    summary = json.loads(capsys.readouterr().out)
    assert [p["status"] for p in summary["points"]] == ["ok", "oom", "ok"]
    recs = results.read(f"{d}/results.jsonl").records
    assert [(r["kind"], r["point_id"], r["status"]) for r in recs] == [
        ("point", "batch/mb=16/gpus=2", "ok"), ("point", "batch/mb=64/gpus=2", "oom"),
        ("point", "batch/mb=256/gpus=2", "ok")]
    assert recs[1]["error"]["reason"] == "CUDA out of memory" and recs[1]["labels"]["micro_batch"] == 64
    # An OOM is a result: the same command again launches nothing.
    calls.clear()
    rc, _ = _sweep(tmp_path, {}, calls)
    assert rc == 0 and calls == []


def test_failed_point_exits_1_and_is_retried(tmp_path, capsys):
    calls: list = []
    rc, d = _sweep(tmp_path, {256: "failed"}, calls)
    assert rc == 1 and calls == [16, 64, 256]
    calls.clear()
    rc, _ = _sweep(tmp_path, {}, calls)
    assert rc == 0 and calls == [256]


def test_interrupted_point_is_not_recorded(tmp_path, capsys):
    from bench.core import results

    calls: list = []
    rc, d = _sweep(tmp_path, {64: "interrupted"}, calls)
    assert rc == 130 and calls == [16, 64]
    assert [r["point_id"] for r in results.read(f"{d}/results.jsonl").records] == ["batch/mb=16/gpus=2"]
    calls.clear()
    assert _sweep(tmp_path, {}, calls)[0] == 0 and calls == [64, 256]


def test_resume_refuses_another_config_but_extends(tmp_path, capsys):
    from bench.experiments import sweep

    calls: list = []
    _sweep(tmp_path, {}, calls, values=("16",))
    other = BASE.replace(steps=7)
    pts = plan("batch", other, SuiteOptions(values=("16",), gpu_counts=(2,)), LOCAL2)
    with pytest.raises(BadInput, match="point batch/mb=16/gpus=2 was planned with steps=6, now 7"):
        sweep.open_sweep(str(tmp_path / "batch"), "batch", other, SuiteOptions(), LOCAL2, pts)
    with pytest.raises(BadInput, match="holds a 'batch' sweep, not 'accum'"):
        sweep.open_sweep(str(tmp_path / "batch"), "accum", BASE, SuiteOptions(), LOCAL2, pts)
    # More values: only the new point runs.
    calls.clear()
    assert _sweep(tmp_path, {}, calls, values=("16", "32"))[0] == 0 and calls == [32]


def test_resume_a_sweep_planned_before_a_config_field_existed(tmp_path, capsys):
    import json

    calls: list = []
    _sweep(tmp_path, {}, calls, values=("16",))
    path = tmp_path / "batch" / "sweep.json"
    doc = json.loads(path.read_text())
    for p in doc["points"]:
        del p["config"]["engine"]  # as an older bench wrote it
    path.write_text(json.dumps(doc))
    calls.clear()
    assert _sweep(tmp_path, {}, calls, values=("16",))[0] == 0 and calls == []


def test_disk_full_between_points_stops_the_sweep_and_keeps_the_finished(tmp_path):
    from bench.core import results
    from bench.core.errors import NoRoom, StorageFailed

    calls: list = []
    with pytest.raises(StorageFailed) as e:
        _sweep(tmp_path, {64: "no room"}, calls)
    d = tmp_path / "batch"
    assert calls == [16, 64]
    assert e.value.line() == (f"cannot write {d}/runs (the file system filled during the sweep: 0 KiB free); the "
                              f"sweep stopped before point batch/mb=64/gpus=2; 1 finished point(s) are kept in "
                              f"{d}/results.jsonl")
    assert [r["point_id"] for r in results.read(f"{d}/results.jsonl").records] == ["batch/mb=16/gpus=2"]
    # Full before the first point of this invocation ran: bad input (exit 2), as for a plain run.
    calls.clear()
    with pytest.raises(NoRoom):
        _sweep(tmp_path, {64: "no room"}, calls)
    assert calls == [64]
