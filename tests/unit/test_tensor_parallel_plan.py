"""Tensor parallelism's pure parts: the T x P x D split, the refusals, Megatron's volume, the figures, suites, tune."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bench.analysis import figures, memory_report, volume
from bench.analysis import report_analysis as ra
from bench.analysis import tune_memory as mem
from bench.core import dsconfig, parallel
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.experiments import memory
from bench.experiments.pool import Pool
from bench.experiments.tune_search import Space, Strategy, TuneOptions
from bench.worker.comm_counter import CommCounter
from tests.conftest import assert_bad_input, cli

H4 = "vit-micro-h4-p4-32"  # 4 heads, MLP 384: divides by 2 and 4
RUN = ("run", "--dry-run", "--dataset", "synthetic", "--model", H4)


def test_ranks_form_tp_groups_innermost_node_by_node():
    lay = parallel.layout({"a": [0, 1], "b": [0, 1]}, tensor=2)
    assert lay["split"] == "2x1x2" and lay["tp_groups"] == [[0, 1], [2, 3]] and lay["dp_groups"] == [[0, 2], [1, 3]]
    assert lay["tp_group_hosts"] == [["a"], ["b"]] and lay["tp_spans_nodes"] is False
    assert parallel.layout({"a": [0], "b": [0]}, tensor=2)["tp_spans_nodes"] is True
    assert parallel.layout({"a": [0, 1, 2, 3]}, pipeline=2) == {
        "tensor_parallel": 1, "pipeline_stages": 2, "data_parallel": 2, "split": "1x2x2",
        "order": "rank = d x T + t (T innermost)"}
    # A TP group reads one replica's batches: d = rank // T; pipeline stages: rank = stage D + d.
    assert [parallel.data_rank(r, 4, tensor=2) for r in range(4)] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert [parallel.data_rank(r, 4, pipeline=2) for r in range(4)] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    with pytest.raises(BadInput, match="do not divide 6"):
        parallel.degrees(6, tensor=4)


@pytest.mark.parametrize("args,needles", [
    (("--model", "vit-micro-p4-32", "--tensor-parallel", "2"), ("--tensor-parallel", "3 attention heads")),
    (("--tensor-parallel", "0"), ("--tensor-parallel", "must be >= 1")),
    (("--tensor-parallel", "2", "--engine", "ddp"), ("--tensor-parallel", "DDP")),
    (("--tensor-parallel", "2", "--pipeline-stages", "2"), ("--tensor-parallel", "pipeline")),
    (("--tensor-parallel", "2", "--zero-stage", "2", "--offload"), ("--tensor-parallel", "--offload")),
    (("--tensor-parallel", "2", "--compile"), ("--tensor-parallel", "--compile")),
    (("--tensor-parallel-across-nodes",), ("--tensor-parallel-across-nodes", "T > 1")),
    (("--gpus", "2", "--tensor-parallel", "4", "--engine", "fsdp2"), ("--tensor-parallel", "do not divide 2 rank")),
    (("--gpus", "3", "--tensor-parallel", "2"), ("--tensor-parallel", "do not divide 3 rank")),
])
def test_refusals_are_one_line_naming_the_option(args, needles):
    assert_bad_input(cli(*RUN, *args), *needles)


def test_an_mlp_width_t_does_not_divide_is_refused(monkeypatch):
    monkeypatch.setattr(parallel, "split_dims", lambda model, img: (8, 36))
    c = SimpleNamespace(tensor_parallel=8, tensor_parallel_across_nodes=False, pipeline_stages=1, engine="fsdp2",
                        offload=None, compile=False, model="m", img_size=None)
    with pytest.raises(BadInput, match="--tensor-parallel: m's MLP width 36 does not divide by 8"):
        parallel.check_config(c)


def test_a_tp_group_stays_inside_a_node_unless_asked(tmp_path):
    hf = tmp_path / "hf"
    hf.write_text("node1 slots=1\nnode2 slots=1\n")
    spread = (*RUN, "--hostfile", str(hf), "--engine", "fsdp2", "--tensor-parallel", "2")
    assert_bad_input(cli(*spread), "--tensor-parallel", "node1 1, node2 1", "--tensor-parallel-across-nodes")
    ok = cli(*spread, "--tensor-parallel-across-nodes")
    assert ok.returncode == 0, ok.stderr
    lay = json.loads(ok.stdout)["plan"]["parallel"]
    assert lay["tp_spans_nodes"] is True and lay["tp_group_hosts"] == [["node1", "node2"]]


def test_the_dry_run_says_which_ranks_form_each_group_and_autotp_takes_d_as_its_batch():
    doc = json.loads(cli(*RUN, "--gpus", "4", "--tensor-parallel", "2", "--micro-batch", "8").stdout)
    assert doc["plan"]["parallel"]["tp_groups"] == [[0, 1], [2, 3]]
    ds = doc["deepspeed_config"]
    assert ds["tensor_parallel"]["autotp_size"] == 2 and "train_batch_size" not in ds
    specs = {p: spec for spec in ds["tensor_parallel"]["partition_config"]["layer_specs"] for p in spec["patterns"]}
    qkv = next(v for k, v in specs.items() if "qkv" in k)
    assert qkv["partition_type"] == "column" and qkv["shape"] == [3, -1]  # q, k, v each split: whole heads
    assert {v["partition_type"] for k, v in specs.items() if "proj" in k or "fc2" in k} == {"row"}
    assert dsconfig.batch_sizes(ds, 2) == (8, 1, 16)
    fsdp = json.loads(cli(*RUN, "--gpus", "4", "--tensor-parallel", "2", "--engine", "fsdp2").stdout)
    assert "tensor_parallel" not in fsdp["deepspeed_config"]


def test_a_user_json_may_not_set_another_tp_degree(tmp_path):
    user = tmp_path / "ds.json"
    user.write_text(json.dumps({"tensor_parallel": {"autotp_size": 4}}))
    assert_bad_input(cli(*RUN, "--gpus", "4", "--tensor-parallel", "2", "--deepspeed-config", str(user)),
                     "tensor_parallel.autotp_size is 4", "--tensor-parallel")


def test_megatrons_activation_traffic():
    kw = dict(depth=12, micro_batch=8, tokens=197, width=768, bytes_per_element=2)
    # 4 all-reduces of B N D b per block, each sending 2(T-1)/T of it.
    assert volume.tensor_parallel_comm_bytes(tensor=4, **kw) == 4 * 12 * 8 * 197 * 768 * 2 * 1.5
    assert volume.tensor_parallel_comm_bytes(tensor=2, accum=3, **kw) == 3 * 4 * 12 * 8 * 197 * 768 * 2
    assert volume.tensor_parallel_comm_bytes(tensor=2, recompute=True, **kw) == 5 * 12 * 8 * 197 * 768 * 2
    assert volume.tensor_parallel_comm_bytes(tensor=1, **kw) == 0
    assert volume.tensor_parallel_formula() == "4 L m B N D b 2(T-1)/T"
    assert volume.tensor_parallel_local_params(100, 10, 4) == 35
    with pytest.raises(ValueError):
        volume.tensor_parallel_comm_bytes(tensor=0, **kw)


def test_the_counter_tells_the_tp_groups_calls_apart():
    import inspect

    import torch
    from torch.distributed import distributed_c10d as c10d

    def stand_in(tensor, op=None, group=None, async_op=False):
        return None
    stand_in.__signature__ = inspect.signature(c10d.all_reduce)
    c = CommCounter(timed=True, world_size=lambda g: 2, backend="gloo", group_name=lambda g: g)
    fn = c.wrap("all_reduce", stand_in)
    c.label_group("tp-group", "tensor_parallel")
    c.begin_step()
    fn(torch.zeros(100), group="tp-group")
    fn(torch.zeros(10), group="dp-group")
    c.end_step()
    (step,) = c.per_step()
    assert step["ops"]["all_reduce"]["calls"] == 2 and step["ops"]["all_reduce"]["buffer_bytes"] == 440
    assert step["by_group"] == {"tensor_parallel": {"calls": 1, "buffer_bytes": 400, "sent_bytes": 400}}
    plain = CommCounter(timed=True, world_size=lambda g: 2)  # no label: records as before
    plain.begin_step()
    plain.end_step()
    assert "by_group" not in plain.per_step()[0]


def _rank(r: int, tp_sent: float) -> dict:
    step = {"ops": {"all_reduce": {"calls": 17, "buffer_bytes": tp_sent + 8, "sent_bytes": tp_sent + 8,
                                   "seconds": 0.1}}, "seconds": 0.1,
            "by_group": {"tensor_parallel": {"calls": 16, "buffer_bytes": tp_sent, "sent_bytes": tp_sent}}}
    return {"rank": r, "host": "h", "device": "cpu", "images_per_s": 10.0, "warmup_steps": 0, "warmup_s": 0.0,
            "steady_steps": 2, "step_s": [1.0, 1.0], "parts_s": None, "parts_reason": "x", "loss": [2.0, 1.0],
            "train_acc": None, "peak_memory_bytes": 1, "memory_kind": "rss", "comm_steps": [step, step],
            "comm_backend": "gloo", "model_states": {"params": 1, "total": 1},
            "tensor_parallel": {"size": 2, "rank": r % 2, "how": "t", "split_params": 100, "replicated_params": 10,
                                "local_split_params": 50, "tokens": 65, "width": 96, "depth": 4}}


def test_figures_count_a_replicas_images_once_and_shard_psi_t_over_d():
    analytic = 4 * 4 * 16 * 65 * 96 * 4 * 2 * (2 - 1) / 2
    summary = {"world_size": 4, "ranks": [_rank(r, analytic) for r in range(4)], "steps_per_epoch": 10,
               "total_steps": 2, "test": None, "model": {"params": 110}}
    f = figures.from_summary(summary, micro_batch=16, grad_accum=1, planned_world=4, precision="fp32",
                             strategy="fsdp2", tensor_parallel=2, flops_per_image=1e9)
    # Two replicas of two ranks: 16 x 2 images a step, in 2 s for 2 steps.
    assert f["global_batch"] == 32 and f["images_per_s"] == 32.0 and f["images_per_s_per_replica"] == 16.0
    assert f["tensor_parallel"]["params_per_rank"] == 60  # 100 / 2 + 10
    assert f["model_states"]["formula"]["params"] == 4 * 60 / 2  # FSDP2 shards Psi_T over D = 2
    tp = f["comm"]["tensor_parallel"]
    assert tp["bytes_per_step"] == analytic and tp["measured_over_analytic"] == 1.0
    assert f["comm"]["analytic"]["n"] == 2 and f["comm"]["analytic"]["parts"]["tensor_parallel"]["size"] == 2
    # A TP rank computes half of its replica's FLOPs.
    assert f["tflops_per_rank"][0] == pytest.approx(10 * 1e9 / 2 / 1e12)


def test_memory_suite_adds_tp_points_where_the_model_and_ranks_divide():
    h4 = RunConfig(dataset="synthetic", model=H4)
    assert memory.default_strategies(h4, 2)[-1:] == ["fsdp2+tp2"]
    assert memory.default_strategies(h4, 4)[-2:] == ["fsdp2+tp2", "fsdp2+tp4"]
    assert not any("+tp" in s for s in memory.default_strategies(h4.replace(model="vit-micro-p4-32"), 4))
    z3 = memory.config_of(h4, "zero3+tp2", 4)
    assert (z3.engine, z3.zero_stage, z3.tensor_parallel) == ("deepspeed", 3, 2)
    with pytest.raises(BadInput, match="T = 2 divides"):
        memory.config_of(h4, "fsdp2+tp2", 3)
    rec = {"point_id": "memory/fsdp2+tp2/gpus=4", "status": "ok", "labels": {"strategy": "fsdp2+tp2"},
           "config": {"model": H4, "tensor_parallel": 2, "pipeline_stages": 1, "micro_batch": 16},
           "figures": {"world_size": 4, "comm": {"tensor_parallel": {"bytes_per_step": 3e6}}}}
    (s,) = memory_report.strategies([ra.row(rec)])
    assert s["split"] == "2x1x2" and s["comm_tp"] == 3e6 and s["model"] == H4


def test_tune_searches_t_on_gpus_where_it_applies():
    gpu8 = Pool(resources={"n1": list(range(8))}, hostfile=False, device="cuda")
    cpu2 = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cpu")
    h4 = RunConfig(dataset="synthetic", model=H4)
    s = Space.build(h4, TuneOptions(), gpu8)
    assert s.strategies[-2:] == ["fsdp2+tp2", "fsdp2+tp4"] and s.counts_for("fsdp2+tp4") == [4, 8]
    cpu = Space.build(h4, TuneOptions(), cpu2)
    assert not any("+tp" in x for x in cpu.strategies) and any("tensor parallelism not searched" in n
                                                                for n in cpu.notes)
    st = Strategy.of("zero1+tp2")
    assert (st.engine, st.stage, st.tensor) == ("deepspeed", 1, 2)
    assert st.apply(h4).tensor_parallel == 2
    # T = 4 fits no count of 2 ranks: pruned before anything runs, with the reason.
    one = Space.build(h4, TuneOptions(strategies=("zero0", "fsdp2+tp4")), cpu2)
    assert one.strategies == ["zero0"] and "divides none" in one.pruned[0]["reason"]
    assert Space(strategies=[], counts=[4], ladder=[8, 16], accums=[1], global_batch=32).pairs(4, 2) == [(8, 2),
                                                                                                         (16, 1)]


def test_tp_shrinks_the_predicted_states_and_activations():
    dims = mem.vit_dims("vit-l16-384", None, 10)
    assert dims.tokens == 577 and 0.9 * dims.params < dims.split_params < dims.params
    one = mem.predict(dims, n=8, stage=0, precision="bf16", offload=False, micro_batch=8, gpus_per_node=8, nodes=1)
    tp = mem.predict(dims, n=8, stage=0, precision="bf16", offload=False, micro_batch=8, gpus_per_node=8, nodes=1,
                     tensor=4)
    psi_t = dims.split_params / 4 + dims.params - dims.split_params
    assert tp["model_states"] == pytest.approx(16 * psi_t)
    s, h, a = dims.tokens, dims.width, dims.heads
    assert one["activations"] == pytest.approx(8 * dims.depth * s * h * (34 + 5 * a * s / h))
    assert tp["activations"] == pytest.approx(8 * dims.depth * s * h * (10 + 24 / 4 + 5 * a * s / (h * 4)))


def test_the_memory_report_shows_each_strategys_split():
    from rich.console import Console

    from bench.render import memory as render_memory
    from tests.unit.test_plots import _memory_point

    tp = _memory_point("fsdp2+tp2", True)
    tp["config"].update(tensor_parallel=2, engine="fsdp2", model=H4)
    tp["figures"]["comm"]["tensor_parallel"] = {"bytes_per_step": 6.4e6}
    (g,) = ra.group([_memory_point("zero1", True), tp])
    console = Console(width=250, record=True)
    console.print(render_memory.table(g))
    text = console.export_text()
    assert "T x P x D" in text and "TP bytes/step" in text
    assert "2x1x1" in text and "1x1x2" in text and "6.40 MB" in text
