"""bench tune's pure parts: memory formula, search space, bisection, halving budget, ranking, tie rule, command, schema."""

from __future__ import annotations

import shlex

import pytest

from bench.analysis import tune as figures
from bench.analysis import tune_memory as mem
from bench.cluster.hostfile import HostSelection
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.experiments.pool import Pool
from bench.experiments.tune_doc import run_argv
from bench.experiments.tune_search import Candidate, Space, Strategy, TuneOptions, ceiling, finals_repeats, halve, \
    next_probe
from tests.conftest import assert_bad_input, cli

CPU2 = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cpu")
GPU8 = Pool(resources={"n1": list(range(8))}, hostfile=False, device="cuda")
BASE = RunConfig(dataset="synthetic", model="vit-micro-p4-32")


# --- memory ---------------------------------------------------------------------------------------------

def test_model_states_are_the_zero_papers_bytes_per_parameter():
    psi = 1_000_000
    # Mixed precision: 2 + 2 + 12 = 16 bytes per parameter without ZeRO; fp32: 4 + 4 + 8 = 16.
    for prec, (w, g, k) in (("bf16", (2, 2, 12)), ("fp16", (2, 2, 12)), ("fp32", (4, 4, 8))):
        m = mem.model_state_bytes(psi, 1, 0, prec)
        assert (m["weights"], m["gradients"], m["optimizer"]) == (w * psi, g * psi, k * psi)
        assert m["device"] == 16 * psi and m["bytes_per_param_unsharded"] == 16
    # ZeRO-1 divides the optimizer term, ZeRO-2 also the gradients, ZeRO-3 also the weights.
    n = 8
    assert mem.model_state_bytes(psi, n, 1, "bf16")["device"] == 2 * psi + 2 * psi + 12 * psi / n
    assert mem.model_state_bytes(psi, n, 2, "bf16")["device"] == 2 * psi + (2 + 12) * psi / n
    assert mem.model_state_bytes(psi, n, 3, "bf16")["device"] == 16 * psi / n
    # The paper's example: 7.5B parameters on 64 GPUs, ZeRO-3: 1.9 GB per GPU.
    assert mem.model_state_bytes(7.5e9, 64, 3, "fp16")["device"] == pytest.approx(1.875e9)
    # Offload moves the optimizer term (and ZeRO-2's fp32 gradient partition) to host memory.
    off = mem.model_state_bytes(psi, n, 2, "bf16", offload=True)
    assert off["device"] == 2 * psi + 2 * psi / n and off["host"] == 12 * psi / n + 4 * psi / n


def test_vit_dims_count_the_parameters_timm_builds():
    # Recorded by a real run: vit-micro-p4-32 has 459,562 parameters with a 10-way head.
    d = mem.vit_dims("vit-micro-p4-32", None, 10)
    assert (d.params, d.depth, d.width, d.heads, d.tokens) == (459_562, 4, 96, 3, 65)
    assert mem.vit_dims("vit-b16-224", None, 10).params == pytest.approx(85.8e6, rel=0.001)
    assert mem.vit_dims("resnet50", None, 10) is None


def test_activations_scale_with_micro_batch_and_precision():
    d = mem.vit_dims("vit-micro-p4-32", None, 10)
    a16 = mem.activation_bytes(d, 1, "bf16")
    assert a16 == d.depth * d.tokens * d.width * (34 + 5 * d.heads * d.tokens / d.width)
    assert mem.activation_bytes(d, 64, "bf16") == 64 * a16 and mem.activation_bytes(d, 1, "fp32") == 2 * a16
    assert mem.activation_bytes(d, 1, "bf16", checkpointing=True) < a16


def test_deepspeed_estimate_matches_deepspeeds_own():
    ds2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    ds3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    p, big = 85_806_346, 2_362_368
    for off in (False, True):
        cpu, gpu = ds2.estimate_zero2_model_states_mem_needs(p, 4, 2, cpu_offload=off)
        assert mem.deepspeed_estimate(p, 2, off, 4, 2, big) == {"device": gpu, "host": pytest.approx(cpu, abs=1)}
        cpu, gpu, _ = ds3.estimate_zero3_model_states_mem_needs(p, big, 4, 2, cpu_offload=off, cpu_offload_params=False)
        assert mem.deepspeed_estimate(p, 3, off, 4, 2, big) == {"device": gpu, "host": pytest.approx(cpu, abs=1)}
    assert mem.deepspeed_estimate(p, 1, False, 4, 2, big) is None


def test_fits_leaves_headroom():
    assert mem.fits(0.89 * 2**30, 2**30) and not mem.fits(0.95 * 2**30, 2**30)


# --- space ----------------------------------------------------------------------------------------------

def test_space_defaults_by_device():
    s = Space.build(BASE, TuneOptions(), CPU2)
    assert s.strategies == ["zero0", "zero1", "zero2", "zero3"] and s.counts == [1, 2]
    assert any("offload not searched" in n for n in s.notes)
    assert "zero2+offload" in Space.build(BASE, TuneOptions(), GPU8).strategies
    # ZeRO on one rank partitions nothing: only ZeRO-0 runs at one GPU.
    assert s.counts_for("zero0") == [1, 2] and s.counts_for("zero3") == [2]


def test_global_batch_fixes_micro_times_accum_times_ranks():
    s = Space.build(BASE, TuneOptions(global_batch=64, micro_batches=(8, 16, 32, 64)), CPU2)
    assert s.pairs(2) == [(8, 4), (16, 2), (32, 1)]
    assert s.pairs(1) == [(8, 8), (16, 4), (32, 2), (64, 1)]
    for n in (1, 2):
        assert all(m * a * n == 64 for m, a in s.pairs(n))
    with pytest.raises(BadInput, match="--global-batch"):
        Space.build(BASE, TuneOptions(global_batch=3, micro_batches=(8, 16)), CPU2)


def test_strategies_bench_run_refuses_are_pruned_with_the_reason():
    s = Space.build(BASE.replace(precision="bf16"), TuneOptions(strategies=("ddp", "zero1")), CPU2)
    assert s.strategies == ["zero1"]
    (p,) = s.pruned
    assert p["strategy"] == "ddp" and "refused by bench run" in p["reason"] and "fp32" in p["reason"]


def test_strategy_applies_to_the_config():
    cfg = Strategy.of("zero2+offload").apply(BASE)
    assert (cfg.engine, cfg.zero_stage, bool(cfg.offload)) == ("deepspeed", 2, True)
    assert Strategy.of("ddp").apply(BASE).engine == "ddp"


@pytest.mark.parametrize("args, needle", [
    (("--strategies", "zero9"), "--strategies: unknown strategy 'zero9'"),
    (("--budget", "0"), "--budget: must be at least 1"),
    (("--budget-minutes", "-1"), "--budget-minutes"),
    (("--micro-batches", "16,x"), "--micro-batches"),
    (("--global-batch", "64", "--grad-accums", "2"), "--grad-accums: not with --global-batch"),
    (("--trial-steps", "1"), "--trial-steps"),
    (("--gpu-counts", "4"), "--gpu-counts: 4 asked"),
])
def test_bad_input_is_one_line(args, needle):
    assert_bad_input(cli("tune", "--gpus", "2", "--device", "cpu", *args, "--out", "/nonexistent/x"), needle)


# --- bisection and halving ------------------------------------------------------------------------------

def _bisect(ladder, fits_up_to, hint=None):
    known, tried = {}, []
    while (m := next_probe(ladder, known, hint)) is not None:
        tried.append(m)
        known[m] = "ok" if m <= fits_up_to else "oom"
    return ceiling(ladder, known), tried


def test_bisection_finds_the_largest_micro_batch_that_fits():
    ladder = [8, 16, 32, 64, 128, 256, 512, 1024]
    for top in (4, 8, 16, 100, 256, 1024, 4096):
        c, tried = _bisect(ladder, top)
        assert c == max([m for m in ladder if m <= top], default=None)
        assert len(tried) <= 4                         # log2(8) + 1
    assert _bisect([16, 4096], 16)[1] == [4096, 16]    # the largest first: an OOM is cheap to learn
    # Another strategy's ceiling as the first probe: one trial when it fits there and the next is known not to.
    known = {512: "oom"}
    assert next_probe(ladder, known, hint=256) == 256
    known[256] = "ok"
    assert next_probe(ladder, known, hint=256) is None and ceiling(ladder, known) == 256


def test_halving_and_finals_budget():
    assert [halve(k) for k in (1, 2, 3, 5, 8)] == [1, 1, 2, 3, 4]
    assert finals_repeats(remaining=6, finalists=2, repeats=3) == 3
    assert finals_repeats(remaining=5, finalists=2, repeats=3) == 2
    assert finals_repeats(remaining=1, finalists=2, repeats=3) == 0
    assert finals_repeats(remaining=2, finalists=2, repeats=3, have=1) == 2   # the rung's run is the first
    assert finals_repeats(remaining=0, finalists=2, repeats=3, have=1) == 1


# --- ranking and the tie rule ---------------------------------------------------------------------------

def _trial(s, n, mb, steps, ips, rep=1, status="ok"):
    c = Candidate(s, n, mb, 1)
    return {"id": c.trial_id(steps, rep), "candidate": c.to_dict(), "steps": steps, "repeat": rep, "phase": "x",
            "status": status, "duration_s": 1.0, "run_dir": f"/r/{s}{n}{mb}{steps}{rep}", "reason": None,
            "predicted": None, "figures": {"images_per_s": ips, "mfu": None, "mfu_reason": "CPU",
                                           "peak_memory_bytes": 2**30, "comm_share": 0.1, "comm_share_reason": None,
                                           "global_batch": mb * n, "memory_kind": "rss", "model_states_bytes": 1}}


def test_rank_longer_rungs_first_and_efficiency_against_one_gpu():
    trials = [_trial("zero0", 1, 64, 10, 100.0), _trial("zero0", 2, 64, 10, 150.0), _trial("zero1", 2, 64, 10, 190.0),
              _trial("zero2", 2, 64, 10, 300.0, status="oom"), _trial("zero0", 2, 64, 20, 160.0),
              _trial("zero0", 2, 64, 20, 170.0, rep=2)]
    rows = figures.rank(trials)
    assert [r["key"] for r in rows] == ["zero0/gpus=2/mb=64/accum=1", "zero1/gpus=2/mb=64/accum=1",
                                        "zero0/gpus=1/mb=64/accum=1"]
    top = rows[0]
    assert top["images_per_s"] == 165.0 and top["spread"] == 10.0 and top["runs"] == 2
    assert top["efficiency"] == pytest.approx(165.0 / 200.0)
    assert rows[2]["efficiency"] == 1.0


def test_tie_rule():
    def rows(a, b):
        return figures.rank([_trial("zero0", 2, 64, 20, x, rep=i + 1) for i, x in enumerate(a)]
                            + [_trial("zero1", 2, 64, 20, x, rep=i + 1) for i, x in enumerate(b)])
    v = figures.verdict(rows([200, 210, 205], [150, 160, 155]))
    assert v["verdict"] == "winner" and v["winner"].startswith("zero0") and v["spread"] == 10
    v = figures.verdict(rows([200, 230], [190, 200]))
    assert v["verdict"] == "tie" and "within the run-to-run spread" in v["reason"]
    v = figures.verdict(rows([200], [150]))
    assert v["verdict"] == "tie" and "no spread" in v["reason"]
    assert figures.verdict([])["verdict"] == "none"


# --- the command, the schema ----------------------------------------------------------------------------

def test_command_reproduces_the_trial():
    cfg = Strategy.of("zero2+offload").apply(BASE).replace(gpus=2, micro_batch=128, steps=20, out="/tmp/x",
                                                           master_port=29600)
    argv = run_argv(cfg, HostSelection())
    assert argv[:2] == ["bench", "run"] and "--out" not in argv and "--master-port" not in argv
    from bench.core.options import from_args
    from bench.cli import build_parser
    back = from_args(RunConfig, build_parser().parse_args(argv[1:]))
    assert back == cfg.replace(out=RunConfig().out, master_port=None)
    hosts = HostSelection(hostfile="hostfiles/x y", include="n1:0@n2:0")
    line = shlex.join(run_argv(cfg.replace(gpus=None, launcher="openmpi"), hosts))
    assert "--launcher openmpi" in line and "--hostfile 'hostfiles/x y'" in line and "--include n1:0@n2:0" in line


def test_schema_accepts_a_document_and_refuses_a_broken_one():
    import jsonschema

    rows = figures.rank([_trial("zero0", 2, 64, 10, 100.0)])
    doc = {"schema_version": 1, "kind": "tune", "status": "ok", "stopped": None, "name": "tune", "dir": "/t",
           "device": "cpu", "base_config": {}, "options": {}, "memory": {"capacity_bytes": None, "note": "cpu"},
           "budget": {"runs": 3, "minutes": None, "spent_runs": 2, "spent_s": 3.0}, "space": {}, "ceilings": {"zero0": 64},
           "trials": [_trial("zero0", 2, 64, 10, 100.0), {**_trial("zero0", 2, 128, 10, None, status="oom"),
                                                         "reason": "OOM killer"}],
           "pruned": [{"strategy": "zero1", "candidate": None, "reason": "refused"}], "ranking": rows,
           "verdict": figures.verdict(rows), "recommendation": "Use zero0.", "argv": ["bench", "run"],
           "command": "bench run"}
    figures.validate_doc(doc)
    with pytest.raises(jsonschema.ValidationError):
        figures.validate_doc({**doc, "schema_version": 2})
    with pytest.raises(jsonschema.ValidationError):
        figures.validate_doc({**doc, "trials": [{**doc["trials"][0], "status": "ok",
                                                 "figures": {**doc["trials"][0]["figures"], "images_per_s": None}}]})
