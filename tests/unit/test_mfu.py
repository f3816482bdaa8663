"""MFU in every record: F_train x images/s over the peak of the GPU each rank ran on, for the precision used.

Hand-built summaries (the shape bench/worker/main.py writes) with round
numbers, so every expected figure is computed by hand in the test.
"""

from __future__ import annotations

import pytest

from bench.analysis import figures
from bench.core import results
from bench.jobs import train as runner
from bench.core.config import RunConfig
from bench.launch.execute import Outcome

F = 1e11  # training FLOPs per image: a round number keeps the hand arithmetic exact


def _rank(rank: int, device: str, step_s: float = 0.1, steps: int = 4, micro: int = 64) -> dict:
    return {
        "rank": rank, "local_rank": rank, "host": "node1", "pid": 100 + rank, "device": device, "status": "ok",
        "images_per_s": micro / step_s, "warmup_steps": 2, "warmup_s": 1.0, "steady_steps": steps,
        "step_s": [step_s] * steps,
        "parts_s": {"data": 0.001, "forward": 0.03, "backward": 0.06, "allreduce": 0.005, "optimizer": 0.009},
        "loss": [2.3, 2.2, 2.1, 2.0, 1.9, 1.8], "train_acc": [0.1] * 6,
        "peak_memory_bytes": 1 << 30, "memory_kind": "device",
    }


def _summary(*devices: str, step_s: tuple[float, ...] | None = None) -> dict:
    times = step_s or (0.1,) * len(devices)
    return {"world_size": len(devices), "ranks": [_rank(i, d, t) for i, (d, t) in enumerate(zip(devices, times))],
            "test": None, "total_steps": 6, "steps_per_epoch": 100, "num_classes": 10, "train_samples": 12800,
            "flops_per_image": F, "versions": {"torch": "2.14.1", "deepspeed": "0.19.8", "timm": "1.0.31"}}


def _figs(summary: dict, **kw) -> dict:
    return figures.from_summary(summary, micro_batch=64, grad_accum=1, planned_world=summary["world_size"],
                                flops_per_image=summary["flops_per_image"], **kw)


def test_h200_bf16_mfu_by_hand():
    fig = _figs(_summary("NVIDIA H200", "NVIDIA H200"), precision="bf16")
    # 2 ranks x 64 images per 0.1 s step = 1280 img/s; x 1e11 FLOP = 128 TFLOP/s;
    # H200 dense bf16 is 989 TFLOP/s per GPU (bench/data/gpu_specs.json), 1978 for two.
    assert fig["images_per_s"] == pytest.approx(1280.0)
    assert fig["tflops"] == pytest.approx(128.0)
    assert fig["tflops_per_rank"] == pytest.approx([64.0, 64.0])
    assert fig["peak_tflops_per_rank"] == [989.0, 989.0]
    assert fig["mfu"] == pytest.approx(128.0 / 1978.0)
    assert fig["mfu_per_rank"] == pytest.approx([64.0 / 989.0] * 2)
    assert fig["mfu_reason"] is None
    assert [r["mfu"] for r in fig["ranks"]] == pytest.approx([64.0 / 989.0] * 2)


def test_precision_picks_the_peak():
    # fp32 trains on the CUDA cores (torch leaves TF32 matmuls off): 67 TFLOP/s on an H200.
    fig = _figs(_summary("NVIDIA H200"), precision="fp32")
    assert fig["mfu"] == pytest.approx(64.0 / 67.0)


def test_heterogeneous_cluster_divides_by_the_sum_of_its_own_peaks():
    # The A100 rank is slower (0.2 s a step); data-parallel ranks step together at the slowest pace.
    fig = _figs(_summary("NVIDIA H200", "NVIDIA A100-SXM4-80GB", step_s=(0.1, 0.2)), precision="bf16")
    assert fig["images_per_s"] == pytest.approx(640.0)  # 128 images per 0.2 s
    assert fig["mfu"] == pytest.approx(64.0 / (989.0 + 312.0))
    assert fig["mfu_per_rank"] == pytest.approx([64.0 / 989.0, 32.0 / 312.0])


def test_cpu_has_tflops_but_no_mfu_and_says_why():
    fig = _figs(_summary("cpu", "cpu"), precision="fp32")
    assert fig["tflops"] == pytest.approx(128.0)
    assert fig["mfu"] is None and fig["mfu_per_rank"] == [None, None]
    assert fig["mfu_reason"] == figures.CPU_NO_PEAK


@pytest.mark.parametrize("device,precision,needle", [
    ("Tesla P4", "bf16", "no bf16 peak"),          # Pascal: no tensor cores for it
    ("NVIDIA Imaginary X1", "fp32", "not in bench/data/gpu_specs.json"),
])
def test_no_peak_gives_null_mfu_with_a_reason(device, precision, needle):
    fig = _figs(_summary(device), precision=precision)
    assert fig["mfu"] is None and needle in fig["mfu_reason"]


def test_one_unknown_rank_nulls_the_run_mfu_but_not_the_known_rank():
    fig = _figs(_summary("NVIDIA H200", "NVIDIA Imaginary X1"), precision="bf16")
    assert fig["mfu"] is None
    assert fig["mfu_per_rank"][0] == pytest.approx(64.0 / 989.0) and fig["mfu_per_rank"][1] is None


def test_explicit_peak_overrides_the_table():
    fig = _figs(_summary("cpu"), peak_flops=128e12)
    assert fig["mfu"] == pytest.approx(0.5)


def test_model_without_flop_count():
    s = _summary("NVIDIA H200")
    s["flops_per_image"] = None
    fig = _figs(s, precision="bf16")
    assert fig["mfu"] is None and "FLOP count" in fig["mfu_reason"] and "tflops" not in fig


@pytest.mark.process  # the record's provenance asks git for the revision
def test_runner_record_takes_the_peak_from_the_ranks_gpu_and_the_run_precision():
    cfg = RunConfig(dataset="synthetic", precision="bf16", micro_batch=64)
    plan = {"world_size": 2, "nodes": 1, "resources": {"localhost": [0, 1]}, "launcher": "local",
            "device": "cuda", "command": ["python", "-m", "deepspeed.launcher.runner"]}
    outcome = Outcome(status="ok", rc=0, duration_s=10.0, summary=_summary("NVIDIA H200", "NVIDIA H200"))
    rec = runner.record(cfg, plan, "r1", "/tmp/r1", outcome, {})
    results.validate(rec)
    assert rec["figures"]["mfu"] == pytest.approx(128.0 / 1978.0)
    assert rec["figures"]["tflops"] == pytest.approx(128.0)


def test_peak_flops_of():
    assert figures.peak_flops_of("NVIDIA H200", "bf16") == (989e12, None)
    assert figures.peak_flops_of("nvidia h200", "fp16")[0] == 989e12  # lookup ignores case
    assert figures.peak_flops_of("cpu", "fp32") == (None, figures.CPU_NO_PEAK)
