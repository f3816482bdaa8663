"""bench run's heterogeneity gate, on clusters built from recorded nvidia-smi outputs (tests/fixtures/gpu)."""

from __future__ import annotations

import pytest

from bench.core.config import RunConfig
from bench.core.errors import RunFailed
from bench.jobs.gate import gate as judge
from tests.unit.test_hetero import node, tesla, text
from bench.cluster.probe import find_arch_lists


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
