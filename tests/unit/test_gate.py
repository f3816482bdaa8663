"""bench run's heterogeneity gate, on clusters built from recorded nvidia-smi outputs (tests/fixtures/gpu)."""

from __future__ import annotations

import pytest

from bench.core.config import RunConfig
from bench.core.errors import RunFailed
from bench.jobs.gate import gate as judge
from tests.unit.test_hetero import node, tesla, text
from bench.cluster.hetero import verdict
from bench.cluster.probe import find_arch_lists, node_inventory, parse_query_csv


def gate(cfg: RunConfig, nodes: list[dict]) -> dict:
    return judge(nodes, cfg.precision, cfg.micro_batch, strict=cfg.strict)


def _torch_with_pascal() -> dict:
    # torch 1.12.1+cu116 was built for sm_60/sm_61 (recorded arch list): Pascal can run there.
    lists = find_arch_lists(text("torch-capability-and-arch-list_sm80_pt1.12.1-cu116.txt"))
    return {"version": "1.12.1+cu116", "arch_list": lists[0]}


def test_tesla_mix_is_refused_with_the_reason_shown(capsys):
    # torch 2.14.1 (cu130) has no sm_61 kernels: the GTX 1070 and Tesla P4 nodes cannot run at all.
    with pytest.raises(RunFailed, match="cannot run"):
        gate(RunConfig(), tesla())
    err = capsys.readouterr().err
    assert "cluster verdict FAIL (heterogeneous)" in err
    assert "tesla-node4" in err and "tesla-node5" in err


def test_tesla_mix_on_an_old_torch_warns_and_strict_refuses(capsys):
    nodes = tesla(torch=_torch_with_pascal())
    v = gate(RunConfig(), nodes)
    assert v["level"] == "warn" and not v["uniform"]
    err = capsys.readouterr().err
    assert "straggler" in err and "exclude" in err
    with pytest.raises(RunFailed, match="--strict"):
        gate(RunConfig(strict=True), nodes)


def test_fp16_gate_names_the_pascal_nodes(capsys):
    with pytest.raises(RunFailed):
        gate(RunConfig(precision="fp16"), tesla(torch=_torch_with_pascal()))
    assert "fp16" in capsys.readouterr().err


def test_uniform_t4_node_passes_strict(capsys):
    nodes = [node("vector-node1", "nvidia-smi_t4x5.txt")]
    v = gate(RunConfig(strict=True), nodes)
    assert v["level"] == "ok" and v["uniform"]
    assert capsys.readouterr().err == ""


# --- can each node run at all (bench.cluster.readiness) ---------------------------------------------

def _t4(host="vector-node1", **torch):
    inv = node(host, "nvidia-smi_t4x5.txt")
    inv["torch"] = {**(inv.get("torch") or {}), **torch}
    return inv


def test_a_driver_older_than_torchs_cuda_is_refused_naming_the_node():
    # The recorded T4 node's driver supports CUDA 11.7 (nvidia-smi header); torch 2.14.1 is built for CUDA 13.0.
    inv = _t4(version="2.14.1+cu130", cuda="13.0")
    assert inv["cuda_driver_version"] == "11.7"
    with pytest.raises(RunFailed, match="cannot run"):
        judge([inv], "fp32", None)
    older_minor = _t4(version="1.13.1+cu117", cuda="11.8")
    v = judge([older_minor], "fp32", None)
    assert [f["level"] for f in v["findings"] if f["code"] == "driver-too-old"] == ["warn"]


def test_gpus_that_torch_cannot_use_are_refused():
    with pytest.raises(RunFailed):
        judge([_t4(version="2.14.1+cu130", cuda="11.7", cuda_available=False)], "fp32", None)


def test_more_slots_than_gpus_is_refused_not_trimmed():
    from bench.cluster.inventory import selected

    inv = dict(_t4(version="x", cuda="11.7"), slots=list(range(8)))  # slots=8 on a node of 5 T4
    v = verdict([selected(inv)])
    (f,) = [f for f in v["findings"] if f["code"] == "slots-beyond-gpus"]
    assert f["level"] == "fail" and "[5, 6, 7]" in f["message"] and "--include vector-node1:0,1,2,3,4" in f["message"]
    assert not [f for f in verdict([selected(dict(inv, slots=[0, 1]))])["findings"] if f["code"] == "slots-beyond-gpus"]


def test_a_gpu_in_mig_mode_is_refused_with_the_way_on():
    # Recorded `nvidia-smi --query-gpu=uuid,mig.mode.current,...` of a 4-GPU node, GPU 0 in MIG mode.
    smi = parse_query_csv(text("nvidia-smi-query_mig-mode_4gpu.csv"))
    assert [g["mig"] for g in smi["gpus"]] == ["Enabled", "Disabled", "Disabled", "Disabled"]
    v = verdict([node_inventory("compute01", smi)])
    (f,) = [f for f in v["findings"] if f["code"] == "mig-enabled"]
    assert f["level"] == "fail" and "GPU 0" in f["message"] and "--exclude compute01:0" in f["message"]
