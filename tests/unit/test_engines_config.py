"""The memory-wall engines' configuration, formulas and the memory suite's search: pure parts, no process."""

from __future__ import annotations

import pytest

from bench.analysis import figures, memory_report, metrics, volume
from bench.analysis import report_analysis as ra
from bench.core import dsconfig
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.core.model_size import shape_of, vit_params
from bench.core.models import PRESETS, resolve_model
from bench.experiments import memory
from bench.experiments.suites import Pool, SuiteOptions, plan
from bench.jobs.nvme import swap_bytes_per_rank

LOCAL2 = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cpu")
BASE = RunConfig(dataset="synthetic", model="vit-micro-p4-32", micro_batch=16, steps=8)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_parameter_count_is_timms(name):
    # On torch's meta device: timm builds the shapes, no memory is allocated (ViT-H has 631M parameters).
    import timm
    import torch

    spec = resolve_model(name, None, 10)
    with torch.device("meta"):
        model = timm.create_model(spec.timm_name, pretrained=False, num_classes=10, img_size=spec.img_size,
                                  **spec.kwargs)
    assert vit_params(shape_of(spec, 10)) == sum(p.numel() for p in model.parameters())


def test_large_presets_meet_the_memory_wall():
    big = {n: vit_params(shape_of(resolve_model(n, None, 1000), 1000)) for n in ("vit-l16-224", "vit-h14-224")}
    assert 300e6 < big["vit-l16-224"] < 310e6 and 630e6 < big["vit-h14-224"] < 640e6
    assert shape_of(resolve_model("resnet50", None, 10)) is None  # not a ViT bench can count


def test_offload_is_cpu_or_nvme_and_old_records_read_as_cpu():
    assert RunConfig(zero_stage=2, offload="cpu").offload == "cpu"
    assert RunConfig.from_dict({"zero_stage": 2, "offload": True}).offload == "cpu"
    assert RunConfig.from_dict({"offload": False}).offload is None


def test_nvme_ds_config_swaps_optimizer_and_parameters():
    ds = dsconfig.build(RunConfig(zero_stage=3, offload="nvme", nvme_path="/nvme/x"), 2, 10)
    z = ds["zero_optimization"]
    assert z["offload_optimizer"] == {"device": "nvme", "nvme_path": "/nvme/x", "pin_memory": False}
    assert z["offload_param"] == {"device": "nvme", "nvme_path": "/nvme/x", "pin_memory": False}
    assert ds["aio"]["block_size"] == 1 << 20 and ds["zero_force_ds_cpu_optimizer"] is False


def test_relative_paths_become_absolute_for_the_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig(data_dir="data", zero_stage=3, offload="nvme", nvme_path="swap").with_absolute_paths()
    assert cfg.data_dir == str(tmp_path / "data") and cfg.nvme_path == str(tmp_path / "swap")


def test_fsdp2_volume_and_its_fp32_reduction():
    psi, n = 1e6, 2
    assert volume.strategy_of("fsdp2", 0) == "fsdp2"
    assert volume.strategy_of("fsdp2", 0, reshard_after_forward=False) == "fsdp2-keep"
    assert volume.strategy_of("deepspeed", 0, pipeline_stages=2) == "pipeline"
    assert volume.analytic_comm_bytes(psi, 4, n, "fsdp2") == 3 * psi * 4 / 2
    assert volume.analytic_comm_bytes(psi, 4, n, "fsdp2-keep", accum=4) == 5 * psi * 4 / 2
    # bf16 gathers (2 bytes), fp32 reduce-scatter (4): 2 x 2 + 4 bytes per element over the ring.
    assert volume.analytic_comm_bytes(psi, 2, n, "fsdp2", reduce_bytes_per_element=4) == (2 * 2 + 4) * psi / 2
    assert volume.sharded_stage("fsdp2-keep") == 3 and volume.sharded_stage("pipeline") is None


def test_bubble():
    assert metrics.bubble(1, 8) == 0 and metrics.bubble(4, 4) == pytest.approx(3 / 7)
    with pytest.raises(ValueError):
        metrics.bubble(2, 0)


def test_swap_bytes_per_rank():
    # fp32: 12 bytes of optimizer states and 4 of parameters per parameter, split over the ranks.
    assert swap_bytes_per_rank(1000, 2, "fp32") == 8000 and swap_bytes_per_rank(1000, 4, "bf16") == 3500


def test_memory_suite_points():
    ids = [p.id for p in plan("memory", BASE, SuiteOptions(), LOCAL2)]
    assert ids == [f"memory/{s}/gpus=2" for s in ("ddp", "zero0", "zero1", "zero2", "zero3", "zero2+offload",
                                                  "zero3+offload", "fsdp2", "fsdp2-keep", "pipeline")]
    pts = {p.id: p.config for p in plan("memory", BASE.replace(nvme_path="/nvme", precision="bf16"),
                                        SuiteOptions(), LOCAL2)}
    assert "memory/ddp/gpus=2" not in pts  # DDP runs fp32 only
    assert pts["memory/zero3+nvme/gpus=2"].offload == "nvme"
    assert pts["memory/pipeline/gpus=2"].pipeline_stages == 2
    assert pts["memory/fsdp2-keep/gpus=2"].reshard_after_forward is False
    with pytest.raises(BadInput, match="zero3\\+nvme needs --nvme-path"):
        plan("memory", BASE, SuiteOptions(values=("zero3+nvme",)), LOCAL2)
    with pytest.raises(BadInput, match="unknown strategy"):
        plan("memory", BASE, SuiteOptions(values=("zero4",)), LOCAL2)
    with pytest.raises(BadInput, match="--find-max-batch"):
        plan("batch", BASE, SuiteOptions(find_max_batch=True), LOCAL2)


@pytest.mark.parametrize("tried,cap,nxt", [
    ({16: "ok"}, 1024, 32),
    ({16: "ok", 32: "ok", 64: "oom"}, 1024, 48),
    ({16: "ok", 32: "ok", 64: "oom", 48: "ok"}, 1024, 56),
    ({16: "ok", 32: "ok", 64: "oom", 48: "ok", 56: "oom"}, 1024, 52),
    ({16: "ok", 32: "ok", 64: "oom", 48: "ok", 56: "oom", 52: "ok"}, 1024, None),  # 52..56: within an eighth
    ({512: "ok"}, 1000, None),   # doubling would pass the cap
    ({16: "oom"}, 1024, 8),      # not even the base fits: halve
    ({1: "oom"}, 1024, None),
    ({16: "ok", 32: "failed"}, 1024, None),  # a failure is not a memory wall
])
def test_next_micro_batch(tried, cap, nxt):
    assert memory.next_micro_batch(tried, cap) == nxt


def test_find_max_batch_runs_the_search_and_resumes_from_the_records(tmp_path, capsys):
    from bench.cluster.hostfile import HostSelection
    from bench.experiments import suites, sweep
    from bench.render.progress import SweepProgress
    from tests.unit.test_suites import _fake_runner

    opts = SuiteOptions(values=("zero3",), find_max_batch=True)
    d = str(tmp_path / "memory")

    def go(calls):
        pts = plan("memory", BASE, opts, LOCAL2)
        done = sweep.open_sweep(d, "memory", BASE, opts, LOCAL2, pts)
        outcomes = {b: "oom" for b in range(101, 2000)}  # the wall: 100 images fit, 101 do not
        return sweep.run_points(pts, HostSelection(), d, done, run_one=_fake_runner(outcomes, calls),
                                view=SweepProgress("memory", quiet=True),
                                follow=lambda p, latest: suites.follow_ups(p, latest, opts, LOCAL2))

    calls: list = []
    assert go(calls) == 0
    assert calls == [16, 32, 64, 128, 96, 112, 104]
    capsys.readouterr()
    again: list = []
    assert go(again) == 0 and again == []  # resumed: every try is a recorded point, nothing runs again
    from bench.core import results
    rows = [ra.row(r) for r in results.read(f"{d}/results.jsonl").records]
    (s,) = memory_report.strategies(rows)
    assert s["strategy"] == "zero3" and s["max_batch"]["fits"] == 96 and s["max_batch"]["oom"] == 104


def test_pipeline_figures_count_images_once_per_replica():
    rank = {"rank": 0, "host": "h", "device": "cpu", "images_per_s": 10.0, "warmup_steps": 0, "warmup_s": 0.0,
            "steady_steps": 2, "step_s": [1.0, 1.0], "parts_s": None, "parts_reason": "whole", "loss": [2.0, 1.0],
            "train_acc": None, "train_acc_reason": "loss only", "peak_memory_bytes": 1, "memory_kind": "rss",
            "comm_steps": [], "pipeline": {"stage": 0, "stage_params": 7, "stages": [{"stage": 0, "layers": ["Embed"]},
                                                                                     {"stage": 1, "layers": ["Head"]}]}}
    other = {**rank, "rank": 1, "pipeline": {**rank["pipeline"], "stage": 1, "stage_params": 5}}
    summary = {"world_size": 2, "ranks": [rank, other], "steps_per_epoch": 10, "total_steps": 2, "test": None,
               "model": {"params": 12}}
    fig = figures.from_summary(summary, micro_batch=4, grad_accum=2, planned_world=2, strategy="pipeline",
                               pipeline_stages=2)
    # 4 x 2 images a step for the one replica, not for each of its 2 stages: 16 images in 2 s.
    assert fig["global_batch"] == 8 and fig["images_per_s"] == 8.0
    assert fig["pipeline"]["stage_params_total"] == 12 and fig["pipeline"]["bubble"] == pytest.approx(1 / 3)
    assert fig["parts_s"] is None and fig["parts_reason"] == "whole" and fig["train_acc"] is None
    assert fig["model_states"]["formula"] is None and fig["model_states"]["formula_reason"]
