"""The heterogeneity verdict, on clusters built from recorded nvidia-smi outputs through the parsers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.core.gpus import lookup
from bench.cluster.hetero import exclude_spec, verdict
from bench.cluster.probe import find_arch_lists, node_inventory, parse_nvidia_smi_q, parse_nvidia_smi_table, parse_query_csv

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
VERSIONS = {"torch": "2.14.1", "torchvision": "0.29.1", "deepspeed": "0.19.8", "timm": "1.0.31"}


def text(name: str) -> str:
    return (FIX / name).read_text()


def torch_2_14() -> dict:
    (arch,) = find_arch_lists(text("torch-arch-list_pt2.14.1-cu130.txt"))
    return {"version": "2.14.1+cu130", "arch_list": arch}


def node(host: str, fixture: str, *, torch: dict | None = None, versions: dict | None = None, image=None) -> dict:
    parse = parse_nvidia_smi_table
    if fixture.startswith("nvidia-smi-q_"):
        parse = parse_nvidia_smi_q
    elif fixture.endswith(".csv"):
        parse = parse_query_csv
    return node_inventory(host, parse(text(fixture)), versions={**VERSIONS, **(versions or {})},
                          torch_info=torch if torch is not None else torch_2_14(), image=image)  # fmt: skip


def tesla(torch: dict | None = None) -> list[dict]:
    """The study's Tesla cluster: 3 x RTX 3070, GTX 1070, Tesla P4, one GPU each."""
    nodes = [node(f"tesla-node{i}", "nvidia-smi-q_rtx3070_excerpt.txt", torch=torch) for i in (1, 2, 3)]
    nodes.append(node("tesla-node4", "nvidia-smi_gtx1070.txt", torch=torch))
    nodes.append(node("tesla-node5", "nvidia-smi_tesla-p4.txt", torch=torch))
    return nodes


def codes(v: dict, level: str | None = None) -> list[str]:
    return [f["code"] for f in v["findings"] if level is None or f["level"] == level]


def finding(v: dict, code: str) -> list[dict]:
    return [f for f in v["findings"] if f["code"] == code]


def test_tesla_cluster_is_flagged():
    v = verdict(tesla())
    assert json.loads(json.dumps(v)) == v
    assert v["level"] == "fail" and v["uniform"] is False
    assert {"gpu-model-mixed", "gpu-cc-mixed", "driver-mixed", "straggler"} <= set(codes(v, "warn"))
    models = finding(v, "gpu-model-mixed")[0]["message"]
    assert "NVIDIA GeForce RTX 3070" in models and "GeForce GTX 1070" in models and "Tesla P4" in models


def test_tesla_pascal_nodes_fail_the_arch_gate_of_torch_2_14():
    v = verdict(tesla())
    arch = finding(v, "arch-not-built")
    assert [f["hosts"] for f in arch] == [["tesla-node4"], ["tesla-node5"]]
    assert all(f["level"] == "fail" and "sm_61" in f["message"] for f in arch)


def test_tesla_passes_the_arch_gate_of_an_old_wheel_with_sm_60():
    # pt 1.12.1+cu116 shipped sm_60, whose cubin runs on sm_61: the gate depends on the wheel, not the card.
    (old,) = find_arch_lists(text("torch-capability-and-arch-list_sm80_pt1.12.1-cu116.txt"))
    v = verdict(tesla(torch={"version": "1.12.1+cu116", "arch_list": old}))
    assert "arch-not-built" not in codes(v)
    assert v["level"] == "warn"


def test_tesla_precisions():
    v = verdict(tesla())
    assert v["precisions"] == ["fp32"]
    partial = finding(v, "precision-partial")
    assert [f["message"].split()[0] for f in partial] == ["fp16", "bf16"]
    assert all(f["hosts"] == ["tesla-node4", "tesla-node5"] for f in partial)
    for p in ("fp16", "bf16"):
        v = verdict(tesla(), precision=p)
        (f,) = finding(v, "precision-unsupported")
        assert f["level"] == "fail" and f["hosts"] == ["tesla-node4", "tesla-node5"]
        assert "--exclude tesla-node4@tesla-node5" in f["message"]
    assert "precision-unsupported" not in codes(verdict(tesla(), precision="fp32"))


def test_tesla_straggler_is_the_p4():
    v = verdict(tesla())
    p4, rtx = lookup("Tesla P4"), lookup("NVIDIA GeForce RTX 3070")
    assert v["slowest"]["model"] == "Tesla P4" and v["slowest"]["host"] == "tesla-node5"
    assert v["slowest"]["peak_tflops"] == p4.fp32_tflops
    assert v["fastest"]["model"] == rtx.name
    assert v["ratio"] == round(rtx.fp32_tflops / p4.fp32_tflops, 2)
    assert v["exclude"] == "tesla-node4@tesla-node5"  # leaves the three RTX 3070
    (f,) = finding(v, "straggler")
    assert "Tesla P4 on tesla-node5" in f["message"] and f"{p4.fp32_tflops:g} TFLOP/s fp32" in f["message"]
    # Only the RTX 3070 nodes: uniform, and no straggler.
    rest = verdict(tesla()[:3])
    assert rest["uniform"] is True and rest["level"] == "ok" and rest["ratio"] == 1.0


def test_tesla_micro_batch_must_fit_the_smallest_memory():
    v = verdict(tesla(), micro_batch=64, mem_per_sample_gb=0.15)
    (f,) = finding(v, "micro-batch-too-big")
    assert f["hosts"] == ["tesla-node5"] and v["min_memory_mib"] == 7611
    assert v["max_micro_batch"] == math.floor(7611 / 1024 / 0.15)
    ok = verdict(tesla(), micro_batch=16, mem_per_sample_gb=0.15)
    assert "micro-batch-too-big" not in codes(ok) and "micro-batch-fits" in codes(ok, "info")


def test_uniform_t4_node_passes():
    # The recorded T4 node has 5 GPUs (Vector's have 8); four such nodes stand for Vector.
    one = verdict([node("vector-t4-01", "nvidia-smi_t4x5.txt")])
    assert one["level"] == "ok" and one["uniform"] is True and one["gpus"] == 5
    assert one["precisions"] == ["fp32", "fp16"]
    # no bf16 on Turing, on every node alike: a note, not a warning; and which image variant runs a T4
    assert codes(one) == ["image-variant", "precision-none"]
    four = verdict([node(f"vector-t4-0{i}", "nvidia-smi_t4x5.txt") for i in range(1, 5)])
    assert four["level"] == "ok" and four["uniform"] is True and four["gpus"] == 20
    assert verdict([node("v", "nvidia-smi_t4x5.txt")], precision="bf16")["level"] == "fail"


@pytest.mark.parametrize(
    "fixture", ["nvidia-smi_a100-sxm4-80gb_x8.txt", "nvidia-smi-q_a100-sxm4-80gb_x8.txt", "nvidia-smi-query_h200x8.csv"]
)
def test_uniform_8_gpu_nodes_pass(fixture):
    v = verdict([node("n1", fixture), node("n2", fixture)], precision="bf16", micro_batch=256, mem_per_sample_gb=0.15)
    assert v["level"] == "ok" and v["uniform"] is True and v["gpus"] == 16
    assert v["precisions"] == ["fp32", "fp16", "bf16"]
    assert v["exclude"] is None and v["ratio"] == 1.0


def test_mixed_rtx5090_rtx3090ti_node_is_flagged():
    v = verdict([node("rig", "nvidia-smi_mixed_rtx5090-rtx3090ti_partial.txt")])
    assert v["uniform"] is False and v["level"] == "warn"  # torch 2.14 has sm_86 and sm_120: it can run
    assert "mixed within rig" in finding(v, "gpu-model-mixed")[0]["message"]
    assert {"gpu-memory-mixed", "gpu-cc-mixed", "straggler"} <= set(codes(v, "warn"))
    assert v["slowest"]["model"] == "NVIDIA GeForce RTX 3090 Ti" and v["slowest"]["index"] == 1
    assert v["exclude"] == "rig:1"
    assert v["min_memory_mib"] == 24564


def test_cut_name_is_an_unknown_gpu_not_a_guess():
    v = verdict([node("n1", "nvidia-smi-q_rtx3070_excerpt.txt"), node("n2", "nvidia-smi_rtx3070_name-truncated.txt")])
    (f,) = finding(v, "gpu-unknown")
    assert f["hosts"] == ["n2"] and "nvidia-smi cut the name" in f["message"]


def test_a_node_without_gpu_among_gpu_nodes_fails():
    v = verdict([node("n1", "nvidia-smi_t4x5.txt"), node("n2", "nvidia-smi-failed_no-driver.txt")])
    (f,) = finding(v, "no-gpu")
    assert f["level"] == "fail" and f["hosts"] == ["n2"]
    assert "couldn't communicate with the NVIDIA driver" in f["message"]
    assert v["uniform"] is False


def test_cpu_only_cluster_is_uniform_when_versions_match():
    nodes = [node("c1", "nvidia-smi-failed_no-driver.txt"), node("c2", "nvidia-smi-failed_nvml-version-mismatch.txt")]
    v = verdict(nodes)
    assert v["uniform"] is True and v["level"] == "ok" and codes(v) == ["cpu-only"]
    assert "Driver/library version mismatch" in v["findings"][0]["message"]


def test_library_and_image_mismatches():
    base = "nvidia-smi-failed_no-driver.txt"
    v = verdict([node("c1", base), node("c2", base, versions={"torch": "2.13.0"})])
    assert v["uniform"] is False and codes(v, "warn") == ["torch-version-mixed"]
    v = verdict([node("c1", base), node("c2", base, versions={"deepspeed": None})])
    (f,) = finding(v, "deepspeed-missing")
    assert f["level"] == "fail" and f["hosts"] == ["c2"]
    v = verdict([node("c1", base, image="vitbench:1"), node("c2", base, image="vitbench:2")])
    assert codes(v, "warn") == ["image-mixed"] and v["uniform"] is False


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="fp8"):
        verdict([], precision="fp8")


def test_exclude_spec():
    assert exclude_spec({"a": [0], "b": [1, 0]}, {"a": 1, "b": 4}) == "a@b:0,1"
