"""The GPU table: consistent with itself, with supports(), and with the names real drivers print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.analysis import figures
from bench.core import gpus
from bench.cluster.probe import parse_nvidia_smi_q, parse_nvidia_smi_table, parse_query_csv

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_every_entry_has_a_source_and_sane_figures():
    for spec in gpus.table():
        assert spec.source.strip(), spec.name
        assert gpus.parse_cc(spec.cc) is not None, spec.name
        assert spec.memory_gb > 0 and spec.fp32_tflops > 0, spec.name
        for tensor in (spec.fp16_tflops, spec.bf16_tflops):
            # Tensor-core math is always faster than the CUDA cores' fp32.
            assert tensor is None or tensor > spec.fp32_tflops, spec.name


def test_table_agrees_with_the_precision_gate():
    # A card has an fp16/bf16 peak exactly when supports() lets it train in that precision.
    for spec in gpus.table():
        assert (spec.fp16_tflops is not None) == gpus.supports(spec.cc, "fp16"), spec.name
        assert (spec.bf16_tflops is not None) == gpus.supports(spec.cc, "bf16"), spec.name


def test_names_are_unique_after_normalising():
    seen: dict[str, str] = {}
    for spec in gpus.table():
        for name in (spec.name, *spec.aliases):
            key = gpus.normalise(name)
            assert key not in seen, f"{name!r} collides with {seen[key]!r}"
            seen[key] = spec.name


@pytest.mark.parametrize(
    "name",
    ["GeForce GTX 1070", "NVIDIA GeForce GTX 1070", "nvidia  geforce gtx 1070 ", "NVIDIA GEFORCE GTX 1070"],
)
def test_lookup_ignores_prefix_case_and_spacing(name):
    assert gpus.lookup(name).name == "GeForce GTX 1070"


def test_every_full_name_in_the_fixtures_resolves_with_its_reported_memory():
    parsed = [
        parse_nvidia_smi_table(text("nvidia-smi_t4x5.txt")),
        parse_nvidia_smi_table(text("nvidia-smi_tesla-p4.txt")),
        parse_nvidia_smi_table(text("nvidia-smi_gtx1070.txt")),
        parse_nvidia_smi_table(text("nvidia-smi_mixed_rtx5090-rtx3090ti_partial.txt")),
        parse_nvidia_smi_table(text("nvidia-smi_rtx5090x2_kmd-umd-header_partial.txt")),
        parse_nvidia_smi_q(text("nvidia-smi-q_a100-sxm4-80gb_x8.txt")),
        parse_nvidia_smi_q(text("nvidia-smi-q_rtx3070_excerpt.txt")),
        parse_nvidia_smi_q(text("nvidia-smi-q_t4_excerpt.txt")),
        parse_query_csv(text("nvidia-smi-query_h200x8.csv")),
        parse_query_csv(text("nvidia-smi-query_h100_name-busid-vbios_first-row.csv")),
    ]
    names = set()
    for p in parsed:
        for g in p["gpus"]:
            spec = gpus.lookup(g["name"], g["memory_mib"])
            assert spec is not None, g
            assert gpus.normalise(spec.name) == gpus.normalise(g["name"])
            names.add(spec.name)
    assert {"Tesla T4", "Tesla P4", "GeForce GTX 1070", "NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 3090 Ti",
            "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 3070", "NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= names


def test_names_torch_prints_resolve():
    props = text("torch-device-properties_a100-80gb-pcie.txt")
    m = re.search(r"name='([^']+)'.*total_memory=(\d+)MB", props)
    assert gpus.lookup(m.group(1), int(m.group(2))).name == "NVIDIA A100 80GB PCIe"
    # torch's arch warnings name the card without the NVIDIA prefix of newer drivers.
    warn = text("torch-arch-error_rtx3070_sm86_pt1.7.1.txt")
    assert gpus.lookup(re.search(r"^(GeForce RTX \d+) with", warn, re.M).group(1)).cc == "8.6"
    ti = text("torch-arch-error_gtx1070ti_sm61.txt")
    assert gpus.lookup(re.search(r"^(GeForce GTX 1070 Ti) with", ti).group(1)).cc == "6.1"


def test_cut_a100_name_resolves_by_memory_only():
    g = parse_nvidia_smi_table(text("nvidia-smi_a100-sxm4-80gb_x8.txt"))["gpus"][0]
    assert g["name"] == "NVIDIA A100-SXM..." and gpus.is_truncated(g["name"])
    assert gpus.lookup(g["name"]) is None  # 40 GB and 80 GB SXM4 both fit the cut name
    assert gpus.lookup(g["name"], g["memory_mib"]).name == "NVIDIA A100-SXM4-80GB"


def test_cut_geforce_name_is_not_guessed():
    g = parse_nvidia_smi_table(text("nvidia-smi_rtx3070_name-truncated.txt"))["gpus"][0]
    assert g["name"] == "NVIDIA GeForce ..." and g["memory_mib"] == 7979
    fits = {s.name for s in gpus.candidates(g["name"], g["memory_mib"])}
    # The card is an RTX 3070, but an 8 GB GTX 1070 fits the cut name just as well.
    assert {"NVIDIA GeForce RTX 3070", "GeForce GTX 1070"} <= fits
    assert gpus.lookup(g["name"], g["memory_mib"]) is None


@pytest.mark.parametrize(
    ("cc", "precision", "ok"),
    [
        ("6.0", "fp16", False), ("6.1", "fp16", False), ("7.0", "fp16", True), ("7.5", "fp16", True),
        ("7.5", "bf16", False), ("8.0", "bf16", True), ("8.6", "bf16", True), ("12.0", "bf16", True),
        ("6.1", "fp32", True), ((9, 0), "bf16", True), (None, "fp32", True), (None, "fp16", False),
        ("junk", "bf16", False),
    ],
)  # fmt: skip
def test_supports(cc, precision, ok):
    assert gpus.supports(cc, precision) is ok


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="fp8"):
        gpus.supports("9.0", "fp8")
    with pytest.raises(ValueError, match="int8"):
        gpus.peak_tflops(gpus.lookup("Tesla T4"), "int8")


def test_peak_tflops_reads_the_table():
    # The T4 datasheet's figures (8.1 TFLOPS FP32, 65 TFLOPS mixed FP16/FP32), not the table read back.
    t4 = gpus.lookup("Tesla T4")
    assert gpus.peak_tflops(t4) == 8.1
    assert gpus.peak_tflops(t4, "fp16") == 65.0
    assert gpus.peak_tflops(t4, "bf16") is None  # Turing has no bf16
    assert t4.to_dict()["source"] == t4.source


@pytest.mark.parametrize("name", [
    "NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA A40", "NVIDIA L40", "NVIDIA A30", "NVIDIA RTX A6000",
    "NVIDIA RTX 6000 Ada Generation", "NVIDIA GeForce RTX 4060", "NVIDIA GeForce RTX 4060 Ti",
    "NVIDIA GeForce RTX 4070", "NVIDIA GeForce RTX 4070 Ti", "NVIDIA GeForce RTX 4080", "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 5070", "NVIDIA GeForce RTX 5070 Ti", "NVIDIA GeForce RTX 5080", "NVIDIA GeForce RTX 5090",
])
def test_common_cluster_gpus_have_a_peak_so_mfu_is_not_null(name):
    # The names as nvidia-smi and NVML print them (issue 16: MFU null on common cluster GPUs).
    spec = gpus.lookup(name)
    assert spec is not None and spec.source.strip()
    assert gpus.peak_tflops(spec, "fp32") and gpus.peak_tflops(spec, "bf16") > gpus.peak_tflops(spec, "fp32")
    assert figures.peak_flops_of(name, "bf16")[0] == gpus.peak_tflops(spec, "bf16") * 1e12
