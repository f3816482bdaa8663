"""Tensor parallelism end to end on 2 and 4 CPU ranks with gloo: DTensor (FSDP2's engine) and DeepSpeed's AutoTP.

The model is vit-micro-h4-p4-32 (4 heads, MLP width 384: both divide by 2).
Five short `bench run`s, shared by the module: one rank alone and DDP on 2
ranks are the references; TP = 2 with DTensor on 2 ranks (D = 1) and with
DeepSpeed's AutoTP under ZeRO-1 must train as the one rank does, TP = 2 x
FSDP2 on 4 ranks (2 x 2) as DDP does on the same global batch, all to 1e-5
over 4 steps with clipping on (a TP rank's arithmetic differs from one
process's only in the order of its partial sums). A spawned 2-rank gloo
group checks the split itself: the regrouped qkv rows and the logits
against the unsplit model's. The refusals are tests/unit/test_tensor_parallel_plan.py's.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO, bench, ok_record

pytestmark = pytest.mark.slow

MODEL = "vit-micro-h4-p4-32"
SHORT = ("--dataset", "synthetic", "--model", MODEL, "--synthetic-size", "512", "--micro-batch", "16",
         "--steps", "4", "--timing-warmup", "1", "--json")


def _run(out: str, *args: str) -> dict:
    return ok_record(bench(*SHORT, "--out", out, *(args if "--eval" in args else (*args, "--no-eval"))))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tp") / "results")
    return {
        # These two evaluate the test set too: a TP group counts its replica's hits once.
        "single": _run(out, "--gpus", "1", "--engine", "ddp", "--eval"),
        "tp2": _run(out, "--gpus", "2", "--engine", "fsdp2", "--tensor-parallel", "2", "--eval"),
        "autotp2": _run(out, "--gpus", "2", "--tensor-parallel", "2", "--zero-stage", "1"),
        "ddp2": _run(out, "--gpus", "2", "--engine", "ddp"),
        "tp2x2": _run(out, "--gpus", "4", "--engine", "fsdp2", "--tensor-parallel", "2"),
    }


def _curve(rec: dict) -> list[float]:
    return rec["figures"]["loss"]["curve"]


@pytest.mark.parametrize("name", ["tp2", "autotp2"])
def test_tp2_trains_as_one_rank_and_each_rank_holds_half_the_blocks(runs, name):
    rec, single = runs[name], runs["single"]
    assert _curve(rec) == pytest.approx(_curve(single), abs=1e-5)
    f = rec["figures"]
    tp = f["tensor_parallel"]
    assert tp["size"] == 2 and tp["data_parallel"] == 1 and rec["plan"]["parallel"]["tp_groups"] == [[0, 1]]
    # Each rank holds exactly half of the split layers (qkv, fc1 with their biases, proj and fc2 weights) ...
    assert tp["local_split_params_per_rank"] == [tp["split_params"] // 2] * 2
    whole = single["figures"]["comm"]["analytic"]["params"]
    assert tp["split_params"] + tp["replicated_params"] == whole
    # ... and so, measured from its tensors, its share of the weights: Psi_T = split / 2 + whole parts, 4 bytes.
    for m in f["model_states"]["measured_per_rank"]:
        assert m["params"] == pytest.approx(4 * tp["params_per_rank"], rel=0.01)
    assert f["model_states"]["formula"]["params"] == 4 * tp["params_per_rank"]
    # One replica of two ranks: its images are the micro batch's, not counted once per rank.
    assert f["global_batch"] == 16 and f["images_per_s_per_replica"] == f["images_per_s"]
    if name == "tp2":  # the same weights see the same test set: the same hits, counted once, not per rank
        assert f["test_acc"] == single["figures"]["test_acc"] is not None


@pytest.mark.parametrize("name", ["tp2", "autotp2", "tp2x2"])
def test_counted_tp_bytes_are_megatrons_activation_traffic(runs, name):
    comm = runs[name]["figures"]["comm"]
    tp = comm["tensor_parallel"]
    # 4 blocks x (2 all-reduces forward + 2 backward) of 16 x 65 tokens x 96 x 4 bytes, 2(T-1)/T = 1 of it sent.
    assert tp["analytic"]["bytes_per_step"] == 4 * 4 * 16 * 65 * 96 * 4
    assert tp["measured_over_analytic"] == pytest.approx(1.0, abs=0.05)
    assert tp["calls_per_step_rank0"] >= 16
    parts = comm["analytic"]["parts"]
    assert comm["analytic"]["bytes_per_step"] == parts["data_parallel"]["bytes_per_step"] + tp["analytic"][
        "bytes_per_step"]


def test_tp2_by_fsdp2_on_4_ranks_trains_as_ddp_on_the_same_global_batch(runs):
    rec, ddp = runs["tp2x2"], runs["ddp2"]
    assert _curve(rec) == pytest.approx(_curve(ddp), abs=1e-5)
    f = rec["figures"]
    lay = rec["plan"]["parallel"]
    assert lay["split"] == "2x1x2" and lay["tp_groups"] == [[0, 1], [2, 3]] and lay["dp_groups"] == [[0, 2], [1, 3]]
    assert f["global_batch"] == ddp["figures"]["global_batch"] == 32
    assert f["images_per_s_per_replica"] == pytest.approx(f["images_per_s"] / 2)
    # FSDP2 shards each rank's TP share over the 2 data-parallel ranks: about a quarter of the model.
    tp = f["tensor_parallel"]
    for m in f["model_states"]["measured_per_rank"]:
        assert 0.45 * 4 * tp["params_per_rank"] <= m["params"] <= 0.55 * 4 * tp["params_per_rank"]
    dp = f["comm"]["analytic"]["parts"]["data_parallel"]
    assert dp["n"] == 2 and dp["params"] == tp["params_per_rank"]
    assert set(f["comm"]["ops_rank0"]) >= {"all_gather", "reduce_scatter", "all_reduce"}


_SPLIT = r'''
import os, sys, torch, timm, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from bench.worker import tensor_parallel as tp
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
def make():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=4,
                             embed_dim=96, depth=4, num_heads=4)
whole, split = make(), make()
tp.parallelize(split, init_device_mesh("cpu", (2,)))
x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
# Rank r's qkv rows are q, k and v of heads 2r and 2r+1: rows [s, h, d] of the unsplit weight.
w = whole.blocks[0].attn.qkv.weight.view(3, 4, 24, 96)[:, 2 * rank:2 * rank + 2].reshape(144, 96)
local = split.blocks[0].attn.qkv.weight
assert isinstance(local, DTensor) and torch.equal(local.to_local(), w), "qkv rows"
assert split.blocks[0].attn.num_heads == 2
diff = (split(x) - whole(x)).abs().max().item()
assert diff < 1e-5, diff
print("ok", diff)
'''


def test_the_split_keeps_each_heads_q_k_v_together_and_computes_the_unsplit_model(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "split.py"
    script.write_text(_SPLIT)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / "store")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0 and stdout.startswith("ok"), stderr[-2000:]
