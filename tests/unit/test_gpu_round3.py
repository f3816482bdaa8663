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
    for var in (*flight._SIZE_VARS, *flight._FILE_VARS):
        monkeypatch.delenv(var, raising=False)
    flight.enable(str(tmp_path))
    set_by_bench = {v for v in (*flight._SIZE_VARS, *flight._FILE_VARS) if os.environ.get(v)}
    old = _names_torch_2_7_1()
    assert "TORCH_FR_BUFFER_SIZE" not in old and "TORCH_NCCL_TRACE_BUFFER_SIZE" in old  # the fixture's point
    new = _names_installed_torch((*flight._SIZE_VARS, *flight._FILE_VARS))
    for known in (old, new):
        assert known & set(flight._SIZE_VARS) & set_by_bench, known
        assert known & set(flight._FILE_VARS) & set_by_bench, known
    assert len({os.environ[v] for v in flight._SIZE_VARS}) == 1  # one value, whichever name a torch reads


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
