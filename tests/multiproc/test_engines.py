"""The memory-wall engines end to end on 2 CPU ranks with gloo: FSDP2, DeepSpeed pipeline stages, ZeRO-Infinity.

Each run is a real `bench run`; the runs are shared by the module (one each)
so the checks cost two short runs of their own. DDP and FSDP2 are the points
of the session's `bench sweep ddp` (tests/conftest.py ddp_sweep: the same
runs, six steps), which test_sweep checks as a suite. Losses are compared to the
tolerance the engines' arithmetic allows: FSDP2 and DDP reduce the same fp32
gradients (1e-6), a pipeline computes the unsplit model's forward in two
processes (1e-5 over a few steps).
"""

from __future__ import annotations

import json
import os

import pytest

from bench.core import collectives, results
from tests.conftest import FAST, SWEEP_POINT, assert_bad_input, bench, ok_record

pytestmark = pytest.mark.slow

SHORT = ("--dataset", "synthetic", *FAST, "--steps", "4", "--timing-warmup", "1", "--no-eval", "--json")


def _run(out: str, *args: str, env=None, cwd=None) -> dict:
    return ok_record(bench(*SHORT, "--out", out, *args, env=env, cwd=cwd))


def _points(ddp_sweep) -> dict[str, dict]:
    """The sweep's DDP and FSDP2 points by engine: ok, schema-valid records of `bench run`s."""
    out, proc = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {}
    for rec in results.read(os.path.join(out, "ddp", "results.jsonl")).records:
        results.validate(rec)
        assert rec["status"] == "ok" and rec["figures"]["world_size"] == 2, rec.get("error")
        got[rec["config"]["engine"]] = rec
    return {"ddp": got["ddp"], "fsdp2": got["fsdp2"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ddp_sweep):
    tmp = tmp_path_factory.mktemp("engines")
    out = str(tmp / "results")
    # Gradient clipping off for the pipeline pair: its engine sums the squared norms stage by stage, in another
    # order than one process does, and AdamW magnifies that 1e-7 to ~3e-5 within four steps. Without clipping
    # the two runs are the same arithmetic, so any difference left is the split itself.
    noclip = tmp / "noclip.json"
    noclip.write_text(json.dumps({"gradient_clipping": 0.0}))
    return {
        **_points(ddp_sweep),
        "pipeline": _run(out, "--gpus", "2", "--pipeline-stages", "2", "--grad-accum", "2",
                         "--deepspeed-config", str(noclip)),
        # A relative path, as a user types it: ranks start in their run directory, and still find it.
        "single": _run(out, "--gpus", "1", "--grad-accum", "2", "--deepspeed-config", "noclip.json", cwd=str(tmp)),
    }


def _curve(rec: dict) -> list[float]:
    return rec["figures"]["loss"]["curve"]


def test_fsdp2_trains_as_ddp_with_half_the_states_per_rank(runs):
    ddp, fsdp = runs["ddp"], runs["fsdp2"]
    assert _curve(fsdp) == pytest.approx(_curve(ddp), abs=1e-6)
    total = ddp["figures"]["model_states"]["measured"]["params"]  # DDP: every rank holds all parameters
    per_rank = fsdp["figures"]["model_states"]["measured_per_rank"]
    # Each rank's local DTensor shards: about half (dim-0 chunks: the last rank's may be shorter, and a
    # shard is padded to the chunk size), together the whole model and no more than its padding.
    for m in per_rank:
        assert 0.45 * total <= m["params"] <= 0.55 * total
        assert m["optimizer_states"] <= 0.55 * 2 * total + 64
    assert total <= sum(m["params"] for m in per_rank) <= 1.02 * total
    comm = fsdp["figures"]["comm"]
    # clip_grad_norm_ over DTensor gradients all-reduces the shards' norms through torch's functional
    # collectives (DTensor's Partial -> Replicate), past torch.distributed's Python functions: counted too,
    # once per step, one float per parameter tensor.
    assert set(comm["ops_rank0"]) == {"all_gather", "reduce_scatter", "all_reduce"}
    norms = comm["ops_rank0"]["all_reduce"]
    assert norms["calls"] == 1 and 0 < norms["buffer_bytes"] <= 4 * 200
    # Resharded after forward: gathers in forward and backward, one reduce-scatter: 3 Psi b (n-1)/n.
    assert comm["analytic"]["formula"] == "3 Psi b (n-1)/n"
    # In the ring's figures the calls are the formula's (per-parameter padding aside); gloo's reduce-scatter
    # sends twice the ring's bytes (tests/multihost/test_wire.py), so what it sent is 4/3 of it: (1+1+2)/3.
    ring = sum(v["buffer_bytes"] * collectives.sent_factor(op, 2, "nccl") for op, v in comm["ops_rank0"].items())
    assert 0.99 <= ring / comm["analytic"]["bytes_per_step"] <= 1.05
    assert comm["measured_over_analytic"] == pytest.approx(4 / 3, rel=0.05)


def test_pipeline_stages_compute_the_unsplit_model(runs):
    pipe, single = runs["pipeline"], runs["single"]
    assert _curve(pipe) == pytest.approx(_curve(single), abs=1e-6)
    fig = pipe["figures"]
    p = fig["pipeline"]
    assert p["stages"] == 2 and p["data_parallel"] == 1 and p["micro_batches"] == 2
    assert [s["ranks"] for s in p["per_stage"]] == [[0], [1]]
    assert p["per_stage"][0]["layers"][0] == "Embed" and p["per_stage"][-1]["layers"][-1] == "Head"
    # Each stage holds only its own parameters, and together they are the model.
    assert p["stage_params_total"] == p["model_params"] == single["figures"]["comm"]["analytic"]["params"]
    assert all(0 < s["params"] < p["model_params"] for s in p["per_stage"])
    assert p["bubble"] == pytest.approx(1 / 3)
    # One replica: its images are micro x accum per step, not counted once per stage.
    assert fig["global_batch"] == 16 * 2
    assert fig["parts_s"] is None and "pipeline" in fig["parts_reason"]
    assert set(fig["comm"]["ops_rank0"]) >= {"send", "recv"}
    assert fig["comm"]["analytic"] is None and fig["comm"]["analytic_reason"]
    assert fig["tflops_per_rank"] == [None, None]


def test_pipeline_refuses_zero_2_and_stages_that_do_not_divide(tmp_path):
    out = str(tmp_path / "r")
    assert_bad_input(bench(*SHORT, "--out", out, "--gpus", "2", "--pipeline-stages", "2", "--zero-stage", "2"),
                     "--pipeline-stages", "ZeRO 0-1")
    assert_bad_input(bench(*SHORT, "--out", out, "--gpus", "2", "--pipeline-stages", "3"),
                     "--pipeline-stages", "do not divide 2")
    assert not os.path.exists(out)


@pytest.mark.nvme
def test_nvme_offload_swaps_optimizer_states_to_files(tmp_path):
    # One rank: its fp32 partition (1.8 MB) is above DeepSpeed's 1 MiB swap minimum (MIN_AIO_BYTES); the
    # micro model's parameters stay resident (each under stage3_param_persistence_threshold).
    swap = tmp_path / "nvme"
    rec = _run(str(tmp_path / "r"), "--gpus", "1", "--zero-stage", "3", "--offload", "nvme", "--nvme-path", str(swap))
    with open(os.path.join(rec["run_dir"], "ds_config.json")) as f:
        zero = json.load(f)["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "nvme", "nvme_path": str(swap), "pin_memory": False}
    assert zero["offload_param"]["device"] == "nvme"
    states = rec["figures"]["model_states"]["measured"]
    # 12 bytes (fp32 master, two Adam moments) per parameter, on disk while the rank trains.
    params = rec["figures"]["comm"]["analytic"]["params"]
    assert 12 * params <= states["by_device"]["nvme"] <= 12 * params * 1.02
    assert states["optimizer_states"] < 1000  # in memory: only AdamW's step counters
    # The rank removed its swap files at the end (DeepSpeed leaves them behind): nothing is left on the NVMe.
    assert not list(swap.rglob("*.swp")) and not list(swap.glob("zero_stage_3/*/rank0"))


def test_nvme_offload_without_async_io_is_refused_before_any_rank(tmp_path):
    # CC=/bin/false: DeepSpeed's own check cannot compile its libaio probe, as on a node without libaio-dev.
    out = str(tmp_path / "r")
    proc = bench(*SHORT, "--out", out, "--gpus", "1", "--zero-stage", "3", "--offload", "nvme", "--nvme-path",
                 str(tmp_path / "nvme"), env=dict(os.environ, CC="/bin/false"))
    assert_bad_input(proc, "--offload nvme", "async_io", "libaio-dev")
    assert not os.path.exists(out)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")
def test_nvme_path_without_room_for_the_swap_is_refused(tmp_path):
    from tests.multiproc.test_storage_faults import tmpfs

    # One rank of the micro model swaps (12 + 4) bytes x 459,562 parameters = 7.4 MB; the "NVMe" holds 1 MiB.
    out = str(tmp_path / "r")
    with tmpfs(tmp_path / "nvme", 1024) as mnt:
        proc = bench(*SHORT, "--out", out, "--gpus", "1", "--zero-stage", "3", "--offload", "nvme",
                     "--nvme-path", str(mnt))
    assert_bad_input(proc, "--nvme-path", "1.0 MiB free", "swap 7.0 MiB there")
    assert not os.path.exists(out)


def test_every_engine_resets_its_memory_peak_at_warm_ups_end_and_counts_skipped_steps(runs):
    # Issue 21: the pipeline engine never reset its peak statistics after warm-up. Every engine's loop now
    # starts the steady window (on_steady: torch.cuda.reset_peak_memory_stats on GPUs) at --timing-warmup,
    # and asks the engine whether each step's update was applied (fp16's loss scaler skips some).
    def asked(argv: tuple[str, ...]) -> tuple[int, int]:
        return int(argv[argv.index("--timing-warmup") + 1]), int(argv[argv.index("--steps") + 1])

    for name, rec in runs.items():
        warm, steps = asked(SWEEP_POINT if name in ("ddp", "fsdp2") else SHORT)  # 2 of 6 (the sweep's), 1 of 4
        for r in range(rec["figures"]["world_size"]):
            with open(os.path.join(rec["run_dir"], "ranks", f"rank{r}.json")) as f:
                rank = json.load(f)
            assert rank["steady_from"] == warm and rank["warmup_steps"] == warm, (name, r)
            assert rank["skipped_steps"] == 0 and rank["steady_steps"] == steps - warm, (name, r)  # fp32: none skipped
        assert rec["figures"]["skipped_steps"] == 0
