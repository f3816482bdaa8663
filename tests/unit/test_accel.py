"""The accelerator backends (bench.cluster.accel): a vendor's names only in its backend, the registry, the interface.

The NVIDIA backend is asked about recorded real outputs (tests/fixtures/gpu): no GPU exists here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bench
from bench.cluster import accel
from bench.cluster.accel.base import Accelerator
from bench.cluster.accel.nvidia.smi import parse_query_csv
from bench.cluster.accel.nvidia.topo import parse_nvlink_status, parse_topo_matrix
from bench.core import accel_names
from tests.health_fixtures import GPU, text

BENCH = Path(bench.__file__).resolve().parent
VENDOR_NAMES = re.compile(r"nvidia-smi|pynvml|NVML|CUDA_VISIBLE_DEVICES")


def test_nvidia_is_named_only_in_its_backend_and_the_data_files():
    # Issue 54's Must-show: `grep -rlE "nvidia-smi|pynvml|NVML|CUDA_VISIBLE_DEVICES" bench`.
    named = sorted(str(p.relative_to(BENCH)) for p in BENCH.rglob("*") if p.is_file() and p.suffix != ".pyc"
                   and VENDOR_NAMES.search(p.read_text(encoding="utf-8", errors="replace")))  # fmt: skip
    outside = [p for p in named if not p.startswith(("cluster/accel/nvidia/", "data/"))]
    assert outside == [] and "cluster/accel/nvidia/smi.py" in named


def test_every_registered_backend_implements_the_interface_and_has_its_row_in_the_table():
    assert accel.names()[-1] == "cpu" and set(accel.names()) == set(accel_names.names())
    for name in accel.names():
        b = accel.backend(name)
        assert isinstance(b, Accelerator) and b.name == name
        assert b.collective_backend in ("nccl", "gloo", "rccl", "xccl") and b.device in ("cuda", "cpu", "xpu")
    with pytest.raises(KeyError, match="no accelerator backend 'tpu'"):
        accel.backend("tpu")


def test_a_probe_with_gpus_is_nvidias_and_one_without_is_cpus():
    h200 = parse_query_csv(text(GPU / "nvidia-smi-query_h200x8.csv"))
    assert len(h200["gpus"]) == 8 and accel.detect(h200).name == "nvidia"
    assert accel.detect({"gpus": []}).name == "cpu"
    nv = accel.backend("nvidia")
    assert nv.visible_devices_env == accel_names.visible_env("cuda") and nv.collective_backend == "nccl"
    assert accel.backend("cpu").visible_devices_env is None and accel.backend("cpu").collective_backend == "gloo"
    assert nv.peak(h200["gpus"][0]["name"], h200["gpus"][0]["memory_mib"]).bf16_tflops


def test_the_intra_kind_of_recorded_nvidia_links_is_the_backends_and_a_backend_without_links_says_unknown():
    gpus = [{"index": i, "cc": "9.0", "pci_bus_id": None} for i in range(8)]
    topo = parse_topo_matrix(text(GPU / "nvidia-smi-topo_h200x8.txt"))
    got = accel.backend("nvidia").intra(gpus, topo, None, {})
    assert got["kind"] == "nvswitch" and got["generation"] == "NVLink4"
    assert accel.backend("cpu").intra(gpus, topo, None, {})["kind"] == "unknown"
    a100 = parse_nvlink_status(text(GPU / "nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt"))
    assert a100 and all(isinstance(k, int) for k in a100)


def test_a_backend_registered_later_is_asked_before_nvidia_which_claims_any_gpus(monkeypatch):
    monkeypatch.setattr(accel, "REGISTRY", dict(accel.REGISTRY))
    accel.register("other", "bench.cluster.accel.cpu:Cpu")
    try:
        assert accel.names() == ("other", "nvidia", "amd", "cpu")
        assert [b.name for b in accel.vendors()] == ["cpu", "nvidia", "amd"]   # "other" is the Cpu class here
    finally:
        accel.backend.cache_clear()


def test_the_ranks_read_the_visible_devices_variable_from_the_table():
    var = accel_names.visible_env("cuda")
    assert accel_names.visible_devices({var: "2,3"}) == "2,3" and accel_names.visible_devices({}) is None
    assert accel_names.visible_env("cpu") is None and var in accel_names.VISIBLE_ENVS


def test_the_container_flags_are_the_backends(tmp_path):
    from bench.cluster import container

    ce = container.resolve(f"apptainer exec {tmp_path / 'img.sif'}", {})
    assert ce.with_devices("cuda").argv[2:3] == accel.backend("nvidia").container_flags["apptainer"]
    assert ce.with_devices("cpu") == ce and ce.with_devices("cuda").with_devices("cuda") == ce.with_devices("cuda")
