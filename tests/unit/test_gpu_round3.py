"""What a first GPU run would hit, round three (issue 31): each case on the recorded real output a GPU gives
(NCCL watchdog logs from public issues, torch 2.7.1's libraries), since no GPU runs here (benchmarks/gpu-check.sh
proves the rest on one)."""

from __future__ import annotations

import inspect
import json
import math
import mmap
import os
import re
import shutil
from pathlib import Path

import pytest

from bench.launch import diagnose as diagnose_mod
from bench.launch import flight_dumps, nccl_watchdog, plan, stacks, whereabouts
from bench.launch.cleanup import rank_pids
from bench.launch.environment import rank_environment
from bench.worker import flight

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NCCL = FIXTURES / "nccl"
_PREFIX = re.compile(r"\[rank(\d+)\]:")


def run_dir_of(log: Path, tmp_path: Path) -> Path:
    """A run directory as bench keeps one, from a recorded multi-rank log: logs/rank<R>.log by torch's own
    [rank<R>]: prefix, ranks/pid-<R> for every rank the excerpt shows or names as a dump signal's source."""
    run = tmp_path / log.stem
    (run / "logs").mkdir(parents=True)
    (run / "ranks").mkdir()
    per: dict[int, list[str]] = {}
    named: set[int] = set()
    for line in log.read_text().splitlines(keepends=True):
        if (m := _PREFIX.search(line)) is not None:
            per.setdefault(int(m[1]), []).append(line)
        named.update(int(x) for x in re.findall(r"collective timeout from\s+rank (\d+)", line))
    for r in sorted(set(per) | named):
        (run / "logs" / f"rank{r}.log").write_text("".join(per.get(r, [])))
        (run / "ranks" / f"pid-{r}").write_text(f"gpu-node{r // 4} {4000 + r}\n")
    world = max(set(per) | named) + 1  # bench reads each rank's files by name, for every rank of the plan's world
    (run / "plan.json").write_text(json.dumps({"device": "cuda", "resources": {}, "world_size": world}))
    return run


def nccl_diagnosis(log: str, tmp_path: Path, monkeypatch) -> dict:
    run = run_dir_of(NCCL / log, tmp_path)
    # Every rank died of SIGABRT, as NCCL's watchdog leaves them (what their launcher would say: no GPU here).
    monkeypatch.setattr(diagnose_mod.exits, "signals", lambda run_dir, ranks: {r: "SIGABRT" for r, _, _ in ranks})
    status, err = diagnose_mod.diagnose(str(run), 1, False, 300.0, [])
    assert status == "failed"
    return err


# --- 1. a hang on NCCL named as on gloo -------------------------------------------------------------------

def test_the_rank_with_nothing_pending_is_named_not_rank_0(tmp_path, monkeypatch):
    err = nccl_diagnosis("simple-grpo-46_rank5-idle_excerpt.log", tmp_path, monkeypatch)
    assert err["rank"] == 5, err["reason"]
    assert "no collective pending when rank 2 timed out" in err["reason"] and "#136" in err["reason"]
    assert err["nccl_watchdog"]["odd_ranks"][0] == 5
    at = {e["rank"]: e for e in err["ranks_at"]}
    assert at[2]["at"] == "waiting" and not at[2]["odd"]  # the rank whose timeout set off the dumps: an echo


def test_the_rank_that_did_not_time_out_is_named_for_that_reason(tmp_path, monkeypatch):
    err = nccl_diagnosis("accelerate-3861_validation-on-rank0_excerpt.log", tmp_path, monkeypatch)
    assert err["rank"] == 0 and "no timeout of its own" in err["reason"]
    assert "ranks 1, 2 timed out in collective #22 of PG 0 (default_pg)" in err["reason"]
    assert "SIGABRT" not in err["reason"]


@pytest.mark.parametrize("log, where", [("llamafactory-8261_every-rank-in-allreduce-2847_excerpt.log",
                                         "every rank timed out in all_reduce #2847 of PG 1"),
                                        ("sglang-1693_two-ranks-in-allgather-9141_excerpt.log",
                                         "every rank timed out in all_gather #9141 of PG 3")])
def test_when_every_rank_timed_out_in_one_collective_no_rank_is_blamed(log, where, tmp_path, monkeypatch):
    err = nccl_diagnosis(log, tmp_path, monkeypatch)
    assert err["where"] == "every rank" and err["rank"] is None
    assert where in err["reason"] and "no rank stands out" in err["reason"]
    assert all(e["at"] == "waiting" and not e["odd"] for e in err["ranks_at"])


def test_the_watchdog_s_lines_are_read_in_each_of_their_forms():
    lines = (NCCL / "llamafactory-8261_every-rank-in-allreduce-2847_excerpt.log").read_text().splitlines()
    rank2 = nccl_watchdog.parse([x for x in lines if "[rank2]" in x], 2)
    assert rank2.failed == [{"pg": "1", "seq": 2847, "op": "all_reduce", "ran_s": 600.08}]
    assert rank2.status["1"] == {"enqueued": 2856, "completed": 2846, "desc": None}
    rank1 = nccl_watchdog.parse([x for x in lines if "[rank1]" in x], 1)
    assert rank1.own and rank1.failed == [] and rank1.status["0"]["desc"] == "default_pg"
    sglang = (NCCL / "sglang-1693_two-ranks-in-allgather-9141_excerpt.log").read_text().splitlines()
    rank4 = nccl_watchdog.parse([x for x in sglang if "[rank4]" in x], 4)
    assert rank4.took_down and rank4.failed == [{"pg": "3", "seq": 9141, "op": "all_gather", "ran_s": 600.071}]
    assert nccl_watchdog.parse(["[rank0]: a line of the training script"], 0) is None


def test_a_gloo_run_s_logs_hold_no_nccl_watchdog_line_so_its_diagnosis_is_unchanged(tmp_path):
    run = FIXTURES / "hang" / "zero0-2ranks"
    assert nccl_watchdog.read(str(run), [0, 1]) == {}
    assert nccl_watchdog.verdict({}, rank_pids(str(run))) is None


def test_a_rank_nccl_took_down_before_bench_asked_is_an_echo_not_the_culprit():
    # The recorded gloo hang (rank 1 blocked in data loading), with rank 0's answer gone as if NCCL's watchdog had
    # aborted it before bench's stack request: rank 1 is still the one named, rank 0 is not "did not answer".
    run = FIXTURES / "hang" / "zero0-2ranks"
    answers = {int(p.stem[4:]): json.loads(p.read_text()) for p in (run / "stacks").glob("rank*.json")}
    del answers[0]
    p = json.loads((run / "plan.json").read_text())
    v = whereabouts.verdict(rank_pids(str(run)), answers, {}, {}, None, p["resources"], "cuda",
                            aborted={0: "NCCL's watchdog took it down after its own collective timed out"})
    assert [e["rank"] for e in v.odd] == [1] and "data loading" in v.reason
    at = {e["rank"]: e for e in v.ranks_at}
    assert at[0]["at"] == "aborted" and not at[0]["odd"]
    without = whereabouts.verdict(rank_pids(str(run)), answers, {}, {}, None, p["resources"], "cuda")
    assert [e["rank"] for e in without.odd] == [0, 1]  # what bench said before: rank 0 "did not answer" first


def test_on_gpus_bench_s_watchdog_fires_before_any_collective_times_out():
    for timeout in (10.0, 300.0, 3600.0):
        t = plan.timeouts("cuda", timeout)
        assert t["first"] == "watchdog"
        # bench asks every rank (stacks.WAIT_S) before a collective issued at the run's start could time out,
        # whether the hang comes before the first step (startup) or after it (watchdog).
        assert t["collective_timeout_s"] >= max(t["watchdog_s"], t["startup_s"]) + stacks.WAIT_S + stacks.DUMP_WAIT_S
    # gloo keeps its order: the ranks' own timeouts first, bench's watchdog REPORT_GRACE_S later.
    g = plan.timeouts("cpu", 10.0)
    assert g["first"] == "collective" and g["watchdog_s"] == g["collective_timeout_s"] + plan.REPORT_GRACE_S
    # A collective timeout the user chose is kept on GPUs too (then NCCL's watchdog may end the run first).
    chosen = plan.timeouts("cuda", 300.0, collective_timeout=60.0)
    assert chosen["collective_timeout_s"] == 60 and chosen["first"] == "collective"


# --- 2. both flight-recorder names ------------------------------------------------------------------------

def _names_torch_2_7_1() -> set[str]:
    text = (FIXTURES / "torch" / "torch-2.7.1-cu126_env-names.txt").read_text()
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def _names_installed_torch(names: tuple[str, ...]) -> set[str]:
    import torch

    found = set()
    for lib in ("libtorch_cpu.so", "libtorch_cuda.so"):
        path = Path(torch.__file__).parent / "lib" / lib
        if path.exists():
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                found |= {n for n in names if m.find(b"\0" + n.encode() + b"\0") >= 0}
    return found


def test_each_shipped_torch_finds_the_recorder_s_size_and_file_under_a_name_bench_sets(tmp_path, monkeypatch):
    import torch

    old = _names_torch_2_7_1()
    assert "TORCH_FR_BUFFER_SIZE" not in old and "TORCH_NCCL_TRACE_BUFFER_SIZE" in old  # the fixture's point
    new = _names_installed_torch((*flight._SIZE_VARS, *flight._FILE_VARS))
    for version, known in (("2.7.1+cu126", old), (torch.__version__, new)):
        for var in (*flight._SIZE_VARS, *flight._FILE_VARS):
            monkeypatch.delenv(var, raising=False)
        flight.enable(str(tmp_path), torch_version=version)
        set_by_bench = {v for v in (*flight._SIZE_VARS, *flight._FILE_VARS) if os.environ.get(v)}
        assert known & set(flight._SIZE_VARS) & set_by_bench, (version, known)
        assert known & set(flight._FILE_VARS) & set_by_bench, (version, known)
        assert flight.enabled(version), version
    # torch 2.14.1 warns in every rank's log when the old size name is set at all: bench sets only the new one.
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in set_by_bench


def test_a_user_s_size_under_either_name_reaches_the_other_and_enabled_reads_as_torch_does(tmp_path, monkeypatch):
    for var in flight._SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "500")
    flight.enable(str(tmp_path))
    assert os.environ["TORCH_FR_BUFFER_SIZE"] == "500"
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")
    assert flight.enabled("2.14.1+cu130") and not flight.enabled("2.7.1+cu126")  # 2.7.1 reads only the old name


def test_an_independent_rank_s_own_dump_is_named_by_its_launcher_rank(tmp_path, monkeypatch):
    for var in flight._FILE_VARS:
        monkeypatch.delenv(var, raising=False)
    flight.enable(str(tmp_path), launcher_rank=3)
    prefix = os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
    assert prefix == os.environ["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "flight" / "rank3-group-rank")
    # torch appends the group's rank, 0 in a world of one: two independent ranks' real dumps, as torch names them.
    recorded = FIXTURES / "hang" / "zero0-2ranks" / "flight"
    shutil.copy(recorded / "rank0", prefix + "0")
    shutil.copy(recorded / "rank1", tmp_path / "flight" / "rank5-group-rank0")
    view = flight_dumps.read(str(tmp_path))
    assert sorted(view["ranks"]) == ["3", "5"] and all("groups" in v for v in view["ranks"].values())
    assert flight_dumps.start_analyzer(str(tmp_path), "cuda") is None  # worlds of one: nothing to match


# --- 3. the link tests' recorder, counter and environment -------------------------------------------------

def test_torch_fr_variables_reach_remote_ranks():
    env = rank_environment("cuda", {"TORCH_FR_BUFFER_SIZE": "4000", "TORCH_FR_DUMP_TEMP_FILE": "/shared/fr/rank",
                                    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
    assert env["TORCH_FR_BUFFER_SIZE"] == "4000" and env["TORCH_FR_DUMP_TEMP_FILE"] == "/shared/fr/rank"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_comm_ranks_switch_the_recorder_and_counter_on_before_their_group_exists():
    from bench.worker import comm

    src = inspect.getsource(comm.run)
    assert src.index("flight.enable(run_dir)") < src.index("init(plan")
    assert src.index("comm_counter.install(") < src.index("init(plan")


# --- 7. device_id -----------------------------------------------------------------------------------------

def test_a_comm_rank_binds_its_one_gpu_but_not_on_cpu_nor_on_the_torch_that_hangs_with_it():
    import torch

    from bench.worker import dist

    gpu = torch.device("cuda", 1)
    assert dist.bound_device(torch, gpu) == {"device_id": gpu}
    assert dist.bound_device(torch, torch.device("cpu")) == {}

    class Torch27:  # pytorch/pytorch#153960: 2.6.x-2.7.0 hang with a bound device
        __version__ = "2.7.0+cu126"

    assert dist.bound_device(Torch27, gpu) == {}
    src = inspect.getsource(dist.init)
    assert "init_process_group(backend=backend, timeout=timeout, **bound_device(torch, device))" in src


def test_one_parser_reads_torch_versions_for_the_bound_device_and_the_flight_recorder():
    from bench.core.provenance import release

    assert release("2.14.1+cu130") == (2, 14, 1) and release("2.14.1+cu130", 2) == (2, 14)
    # An NGC pre-release: its minor is known (the recorder's names), its patch is not a number (no range test).
    ngc = "2.5.0a0+872d972e41.nv24.08"
    assert release(ngc) is None and release(ngc, 2) == (2, 5)
    assert release("2.7") is None and release("garbage", 2) is None


# --- 6. bench comm times k back-to-back collectives a sample ------------------------------------------------

def test_a_sample_is_k_back_to_back_collectives_divided_by_k(monkeypatch):
    """A real gloo group of one in this process: the collectives a size issues, and the time it records."""
    import torch
    import torch.distributed as dist

    from bench.worker import comm

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        issued: list[int] = []
        real = comm._run_op

        def counted(*args):
            issued.append(1)
            return real(*args)

        monkeypatch.setattr(comm, "_run_op", counted)
        spec = {"op": "all_reduce", "sizes": [1024], "warmup": 2, "iters": 3}
        (row,) = comm.measure_group(torch, dist, spec, [0], None, 0, torch.device("cpu"), lambda: None,
                                    lambda size, final=True: None)
        k = row["back_to_back"]
        assert 1 <= k <= comm.MAX_BACK_TO_BACK and row["wrong"] == 0
        # warm-up, the collectives k is chosen from, iters samples of k, the #wrong check's own collective
        assert len(issued) == spec["warmup"] + comm.CALIBRATION + spec["iters"] * k + 1
        assert len(row["times_s"]) == spec["iters"]
    finally:
        dist.destroy_process_group()


def test_k_is_the_group_s_largest_so_every_member_issues_as_many():
    import torch
    import torch.distributed as dist

    from bench.worker import comm

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        one = comm.SAMPLE_S / 7.5
        assert comm.back_to_back(torch, dist, one, None, torch.device("cpu")) == math.ceil(comm.SAMPLE_S / one)
        assert comm.back_to_back(torch, dist, 10.0, None, torch.device("cpu")) == 1
        assert comm.back_to_back(torch, dist, 0.0, None, torch.device("cpu")) == comm.MAX_BACK_TO_BACK
    finally:
        dist.destroy_process_group()


# --- 4. --compile below compute capability 7.0 ------------------------------------------------------------

def test_compile_is_refused_in_the_verdict_naming_the_gpus_below_7_0(capsys):
    from bench.cluster.hetero import verdict
    from bench.cluster.inventory import selected
    from bench.core.errors import RunFailed
    from bench.jobs.gate import gate
    from tests.unit.test_hetero import node, tesla

    nodes = [selected(n) for n in tesla()]  # the study's cluster: 3 x RTX 3070, a GTX 1070, a Tesla P4 (recorded)
    v = verdict(nodes, "fp32", compile=True)
    (f,) = [x for x in v["findings"] if x["code"] == "compile-unsupported"]
    assert v["level"] == "fail" and f["hosts"] == ["tesla-node4", "tesla-node5"]
    assert "GTX 1070 (sm 6.1)" in f["message"] and "Tesla P4 (sm 6.1)" in f["message"]
    assert "3070" not in f["message"] and "\n" not in f["message"] and "--exclude tesla-node4@tesla-node5" in f["message"]
    assert "compile-unsupported" not in [x["code"] for x in verdict(nodes, "fp32")["findings"]]
    t4 = [selected(node(h, "nvidia-smi_t4x5.txt")) for h in ("t4-a", "t4-b")]
    assert "compile-unsupported" not in [x["code"] for x in verdict(t4, "fp32", compile=True)["findings"]]
    with pytest.raises(RunFailed):
        gate(nodes, "fp32", None, compile=True)
    assert "[fail] compile-unsupported: --compile:" in capsys.readouterr().err


# --- 8. the loop's overhead ---------------------------------------------------------------------------------

def test_a_world_of_one_skips_deepspeed_s_gradient_all_reduce(monkeypatch):
    """A real DeepSpeed ZeRO-0 engine in a gloo world of one (this process): its gradients are not all-reduced
    over the one rank, and its settings say so."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from bench.core import dsconfig, models
    from bench.core.config import RunConfig
    from bench.launch.plan import free_port
    from bench.worker import dist as worker_dist
    from bench.worker.engines import build_engine, create_model, settings

    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(free_port()), "DS_ACCELERATOR": "cpu"}.items():
        monkeypatch.setenv(k, v)
    worker_dist.init({"device": "cpu", "collective_timeout_s": 60}, via_deepspeed=True)
    try:
        cfg = RunConfig(model="vit-micro-p4-32", dataset="synthetic", micro_batch=4, steps=2, timing_warmup=1)
        spec = models.resolve_model(cfg.model, None, 10)
        x, y = torch.randn(4, 3, 32, 32), torch.arange(4)
        engines = []
        for skip in (True, False):
            torch.manual_seed(0)
            engine = build_engine(cfg, create_model(cfg, spec, 10), dsconfig.build(cfg, 1, 1), torch.device("cpu"))
            if not skip:
                engine.enable_backward_allreduce = True  # DeepSpeed's own behaviour, for the comparison
            engines.append(engine)
        reduced = []  # elements each all-reduce was given
        monkeypatch.setattr(dist, "all_reduce", lambda *a, **k: reduced.append((a[0] if a else k["tensor"]).numel()))
        params = sum(p.numel() for p in engines[0].module.parameters())
        for engine in engines:
            before = len(reduced)
            engine.backward(F.cross_entropy(engine(x), y))
            engine.step()
            engine.reduced = sum(reduced[before:])
        skipped, kept = engines
        # What is left is clipping's one norm; the gradients (every parameter's) are no longer sent to itself.
        assert settings(skipped)["backward_allreduce"] is False and skipped.reduced < params
        assert settings(kept)["backward_allreduce"] is True and kept.reduced >= params  # the path this removes
    finally:
        dist.destroy_process_group()


def test_the_cpu_clock_is_the_host_s_and_says_how_it_timed():
    import torch

    from bench.worker.loop import StepClock

    clock = StepClock(torch.device("cpu"))
    a = clock.mark()
    b = clock.mark()
    assert clock.seconds(a, b) >= 0 and "host clock" in clock.how and not clock.cuda


# --- 5. validate's per-GPU workload on GPUs -------------------------------------------------------------------

def _validation(device: str, level: str = "quick"):
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    v = Validation(ValidateConfig(level=level), HostSelection(), {"n1": [0, 1], "n2": [0, 1]}, references.load(),
                   "/nonexistent")
    v.device = device
    return v


def test_the_cpu_levels_run_what_they_ran():
    from bench.validate.config import LEVELS

    for name, lv in LEVELS.items():
        cfg = _validation("cpu", name).run_config(["n1"], 100)
        assert (cfg.model, cfg.img_size, cfg.micro_batch) == (lv.model, None, lv.micro_batch)


def test_on_gpus_a_step_of_the_per_gpu_workload_takes_tens_of_ms_at_fp32_even_on_the_fastest_gpu():
    """docs/metrics.md's arithmetic, from the FLOP count and the peaks table: the step's FLOPs over the fastest
    fp32 peak of bench/data/gpu_specs.json is tens of milliseconds; the micro model's was microseconds."""
    from bench.core import gpus
    from bench.core.flops import vit_train_flops
    from bench.validate.config import LEVELS

    fastest = max(s.fp32_tflops for s in gpus.table()) * 1e12
    shapes = {"vit-b16-224": (16, 768, 12, 12), "vit-micro-p4-32": (4, 96, 4, 3)}
    for name, lv in LEVELS.items():
        v = _validation("cuda", name)
        cfg = v.run_config(["n1"], 100)
        assert (cfg.model, cfg.img_size, cfg.micro_batch) == (lv.cuda_model, lv.cuda_img_size, lv.cuda_micro_batch)
        assert v.identity()["model"] == lv.cuda_model and v.identity()["micro_batch"] == lv.cuda_micro_batch
        patch, width, depth, heads = shapes[lv.cuda_model]
        step = vit_train_flops(lv.cuda_img_size, patch, width, depth, heads, num_classes=10) * lv.cuda_micro_batch
        assert step / fastest >= 0.02, (name, step / fastest)
    micro = vit_train_flops(32, 4, 96, 4, 3, num_classes=10) * LEVELS["quick"].micro_batch
    assert micro / fastest < 1e-4  # what the quick level timed on a GPU before: the host, not the GPU


def test_the_per_gpu_figure_on_gpus_is_the_cuda_micro_batch_over_the_step(monkeypatch):
    from bench.validate import gpus, runs

    v = _validation("cuda")
    steps = {("n1", 0): 0.05, ("n1", 1): 0.05, ("n2", 0): 0.05, ("n2", 1): 0.05}
    monkeypatch.setattr(runs, "alone", lambda v_, resources, tag, steps_=None, with_numerics=False, **kw: {"alone": [
        {"host": h, "slot": s, "status": "ok", "step_s": [t] * 20, "params": 1} for (h, s), t in steps.items()]})
    gpus.throughput(v)
    assert v.figures["gpu_images_per_s"]["n1:0"] == pytest.approx(v.level.cuda_micro_batch / 0.05)
