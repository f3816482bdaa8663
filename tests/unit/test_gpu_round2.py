"""What a first GPU cluster run would hit, round two (issue 21): each case on the exact environment, argv or
recorded inventory a GPU cluster gives, since no GPU runs here (benchmarks/gpu-check.sh proves the rest)."""

from __future__ import annotations


import pytest

from bench.cluster.hetero import verdict
from bench.cluster.inventory import selected
from bench.cluster.mpirun import mpirun_args
from bench.core import dsconfig
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from bench.jobs.comm import cap_sizes
from bench.launch.environment import rank_environment
from bench.worker.bootstrap import bind_device, set_threads
from bench.worker.loop import StepTimes, steady_window
from tests.unit.test_hetero import node

# What srun --gpus-per-task=1 gives the second task of a node (SLURM_LOCALID 1, one GPU visible as cuda:0),
# after bench's map_launcher_env (RANK/WORLD_SIZE/LOCAL_RANK from SLURM_*).
SLURM_TASK_1 = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2",
                "CUDA_VISIBLE_DEVICES": "1", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}


# --- 1. Slurm per-task GPU binding ------------------------------------------------------------------

def test_local_rank_is_the_device_index_before_deepspeed_reads_it():
    env = dict(SLURM_TASK_1)
    launcher, index = bind_device(visible=1, environ=env)
    # DeepSpeed's init_process_group(device_id=cuda:LOCAL_RANK), engine.set_device and PipelineModule read this.
    assert (launcher, index, env["LOCAL_RANK"]) == (1, 0, "0")
    env = dict(SLURM_TASK_1, CUDA_VISIBLE_DEVICES="0,1")  # --gpus-per-node: the task sees both
    assert bind_device(visible=2, environ=env) == (1, 1) and env["LOCAL_RANK"] == "1"
    env = {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "LOCAL_RANK": "1"}  # DeepSpeed's engine asserts the two agree
    bind_device(visible=1, environ=env)
    assert env["LOCAL_RANK"] == env["OMPI_COMM_WORLD_LOCAL_RANK"] == "0"


def test_dist_init_binds_the_device_before_deepspeed_starts():
    import inspect

    from bench.worker import dist

    src = inspect.getsource(dist.init)
    assert src.index("bind_device(") < src.index("deepspeed.init_distributed(")
    assert src.index("torch.cuda.set_device(index)") < src.index("deepspeed.init_distributed(")


# --- 2. fp16 from a GPU-less login node ---------------------------------------------------------------

def _t4_nodes():
    return [dict(node(h, "nvidia-smi_t4x5.txt"), slots=[0]) for h in ("10.0.0.1", "10.0.0.2")]


def _dry(tmp_path, monkeypatch, capsys, **cfg) -> dict:
    from bench.cluster.hostfile import HostSelection
    from bench.jobs import train

    hf = tmp_path / "hf"
    hf.write_text("10.0.0.1 slots=1\n10.0.0.2 slots=1\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: this node has no GPU
    nodes = _t4_nodes()
    return train.dry_run(RunConfig(dataset="synthetic", launcher="openmpi", out=str(tmp_path / "out"), **cfg),
                         HostSelection(hostfile=str(hf)), inspected=(nodes, verdict(nodes, cfg.get("precision"))))


def test_fp16_launched_from_a_gpu_less_node_onto_t4_nodes_is_not_refused(tmp_path, monkeypatch, capsys):
    doc = _dry(tmp_path, monkeypatch, capsys, precision="fp16")
    assert doc["plan"]["device"] == "cuda" and doc["deepspeed_config"]["fp16"]["enabled"] is True


def test_fp16_is_still_refused_when_this_node_is_the_cpu_node(tmp_path, monkeypatch):
    from bench.cluster.hostfile import HostSelection
    from bench.jobs import train

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BadInput, match="--precision fp16"):
        train.dry_run(RunConfig(dataset="synthetic", precision="fp16", out=str(tmp_path)), HostSelection())


# --- 10. ZeRO-Offload / ZeRO-Infinity pin on GPU runs ----------------------------------------------------

def test_offload_pins_host_memory_on_the_nodes_gpus(tmp_path, monkeypatch, capsys):
    doc = _dry(tmp_path, monkeypatch, capsys, zero_stage=2, offload="cpu")
    assert doc["deepspeed_config"]["zero_optimization"]["offload_optimizer"]["pin_memory"] is True
    z3 = dsconfig.build(RunConfig(zero_stage=3, offload="nvme", nvme_path="/nvme"), 2, 10, device="cuda")
    assert z3["zero_optimization"]["offload_param"]["pin_memory"] is True
    assert z3["zero_optimization"]["offload_optimizer"]["pin_memory"] is True
    cpu = dsconfig.build(RunConfig(zero_stage=3, offload="nvme", nvme_path="/nvme"), 2, 10, device="cpu")
    assert cpu["zero_optimization"]["offload_param"]["pin_memory"] is False


# --- 3. a node whose slots all lie beyond its GPUs --------------------------------------------------------

def test_slots_beyond_every_gpu_of_a_node_are_refused_not_a_cpu_run():
    inv = dict(node("vector-node1", "nvidia-smi_t4x5.txt"), slots=[5, 6])  # slots 5,6 on a node of 5 T4
    v = verdict([selected(inv)])
    assert v["level"] == "fail" and "cpu-only" not in [f["code"] for f in v["findings"]]
    (f,) = [f for f in v["findings"] if f["code"] == "slots-beyond-gpus"]
    assert "[5, 6]" in f["message"] and "--exclude vector-node1" in f["message"]
    both = [selected(inv), selected(dict(node("vector-node2", "nvidia-smi_t4x5.txt"), slots=[0]))]
    assert "no-gpu" not in [f["code"] for f in verdict(both)["findings"]]  # it has GPUs: never counted GPU-less


# --- 4. OpenMP threads of GPU ranks --------------------------------------------------------------------

def test_gpu_ranks_get_the_nodes_cores_over_its_ranks_cpu_ranks_one():
    assert rank_environment("cpu", {})["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in rank_environment("cuda", {})
    assert rank_environment("cuda", {"OMP_NUM_THREADS": "8"})["OMP_NUM_THREADS"] == "8"
    env = {"LOCAL_SIZE": "8"}  # DeepSpeed's launch.py on a node of 8 ranks
    assert set_threads("cuda", env, cpus=64) == {"omp_num_threads": "8", "why": "GPU run: 64 cores / 8 rank(s) on "
                                                                                 "this node"}
    assert env["OMP_NUM_THREADS"] == "8"
    assert set_threads("cuda", {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, cpus=16)["omp_num_threads"] == "4"
    assert set_threads("cuda", {"SLURM_NTASKS_PER_NODE": "2", "SLURM_CPUS_PER_TASK": "12"}, cpus=2)[
        "omp_num_threads"] == "12"
    kept = set_threads("cpu", {"OMP_NUM_THREADS": "1"}, cpus=64)
    assert kept["omp_num_threads"] == "1" and "kept" in kept["why"]


# --- 6. fp16 steps the loss scaler skipped -------------------------------------------------------------

def test_skipped_steps_are_left_out_of_the_steady_window():
    t = StepTimes(step=[9.0, 1.0, 0.2, 1.0, 0.2, 1.0], applied=[True, True, False, True, False, True])
    kept, skipped = steady_window(t, warmup_steps=1)
    assert kept == [1.0, 1.0, 1.0] and skipped == [2, 4]
    none_applied = StepTimes(step=[1.0, 0.5, 0.5], applied=[False, False, False])
    assert steady_window(none_applied, 1) == ([0.5, 0.5], [1, 2])  # kept, and every one counted skipped


# --- 8. NCCL's interface syntax is not Open MPI's ---------------------------------------------------------

@pytest.mark.parametrize("env,include", [
    ({"NCCL_SOCKET_IFNAME": "ib0"}, "ib0"),
    ({"NCCL_SOCKET_IFNAME": "=eth0,ib1"}, "eth0,ib1"),
    ({"NCCL_SOCKET_IFNAME": "^lo,docker", "GLOO_SOCKET_IFNAME": "ib0"}, "ib0"),
    ({"NCCL_SOCKET_IFNAME": "^lo", "OMPI_MCA_btl_tcp_if_include": "10.1.0.0/16"}, "10.1.0.0/16"),
    ({"GLOO_SOCKET_IFNAME": "vb0"}, "vb0")])
def test_mpirun_gets_exact_interface_names(env, include):
    assert mpirun_args(env)[-3:] == ["--mca", "btl_tcp_if_include", include]


@pytest.mark.parametrize("value,needle", [("^lo,docker", "an exclusion"), ("ib", "'ib' is a prefix"),
                                          ("eth0,en", "'en' is a prefix")])
def test_nccl_values_open_mpi_cannot_take_are_refused_in_one_line(value, needle):
    with pytest.raises(BadInput, match=needle) as e:
        mpirun_args({"NCCL_SOCKET_IFNAME": value})
    assert "\n" not in str(e.value) and f"NCCL_SOCKET_IFNAME={value}" in str(e.value)


# --- 9. bench comm's sizes fit the smallest GPU ------------------------------------------------------------

def test_comm_sizes_are_capped_by_the_smallest_gpu_and_the_record_says_so():
    from bench.core.sizes import parse_sizes

    sizes = parse_sizes("1K:1G")  # 256M float32 elements is 1 GiB per rank
    kept, cap = cap_sizes(sizes, "reduce_scatter", 32, 15360)  # a 16 GB T4 (15360 MiB)
    # reduce_scatter holds 2 x 32 x S + S bytes per rank: 65 S <= 7.5 GiB -> S <= 118 MiB -> 64M the largest.
    assert kept[-1] == 64 << 20 and cap["dropped"] == [128 << 20, 256 << 20, 512 << 20, 1 << 30]
    assert "15360 MiB" in cap["reason"] and cap["limit_bytes"] == 15360 * 2**20 // 2
    assert cap_sizes(sizes, "all_reduce", 32, 143771)[1]["dropped"] == []  # H200: 3 S of 1 GiB fits
    assert cap_sizes(sizes, "all_gather", 2, None) == (sizes, {"dropped": [], "limit_bytes": None,
                                                                "reason": "no GPU memory to fit: sizes as given"})
