"""bench comm's pure parts: sizes, rows (figures from bench.analysis.metrics), the collective table and the exact expected results."""

from __future__ import annotations

import warnings

import pytest

from bench.analysis.comm_figures import row, rows_from_summary
from bench.core import collectives
from bench.core.errors import BadInput
from bench.core.sizes import parse_size, parse_sizes
from bench.render.comm import COLUMNS, row_cells


def test_sizes_range_is_powers_of_two_like_nccl_tests():
    assert parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert parse_sizes("64K,4K,4K") == [4096, 65536]
    assert parse_sizes("1G:1G") == [1 << 30]
    assert parse_size("512") == 512 and parse_size("16MB") == 16 << 20


@pytest.mark.parametrize("text", ["0K", "4X", "", "8K:1K", "K"])
def test_bad_sizes_name_the_option(text):
    with pytest.raises(BadInput, match="^--sizes: "):
        parse_sizes(text)


def test_row_figures_are_nccl_tests_definitions_by_hand():
    # 4 ranks all_reduce of 1 MiB, median 2 ms: algbw = S / t, busbw = algbw * 2(n-1)/n.
    r = row("all_reduce", 4, 1 << 20, [0.003, 0.002, 0.001], 0, "all")
    assert r["time_s"] == {"min": 0.001, "median": 0.002, "max": 0.003}
    assert r["algbw"] == pytest.approx((1 << 20) / 0.002)
    assert r["busbw"] == pytest.approx((1 << 20) / 0.002 * 2 * 3 / 4)
    # all_gather: S is the gathered output, n x the per-rank buffer; factor (n-1)/n.
    g = row("all_gather", 4, 1000, [0.001], 0, "all")
    assert g["bytes"] == 4000 and g["busbw"] == pytest.approx(4000 / 0.001 * 3 / 4)
    b = row("broadcast", 4, 1000, [0.001], 0, "all")
    assert b["busbw"] == pytest.approx(b["algbw"])


def test_printed_row_comes_from_the_json_row():
    r = row("all_reduce", 2, 4096, [0.0005], 3, "10.0.0.1+10.0.0.2")
    cells = row_cells(r)
    assert len(cells) == len(COLUMNS)
    assert cells[0] == r["group"] and cells[1] == "4K" and cells[-1] == "3"
    assert cells[4] == "500.0" and float(cells[7]) == pytest.approx(r["busbw"] / 1e9, rel=1e-2)


def test_rows_from_summary_take_the_slowest_rank_per_iteration_and_add_wrong_counts():
    summary = {"groups": [[0, 1]], "ranks": [
        {"rank": 0, "groups": [{"group": 0, "rows": [{"size": 1024, "times_s": [0.1, 0.3], "wrong": 0}]}]},
        {"rank": 1, "groups": [{"group": 0, "rows": [{"size": 1024, "times_s": [0.2, 0.1], "wrong": 2}]}]},
    ]}
    (r,) = rows_from_summary(summary, "all_reduce", ["pair"])
    assert r["iters"] == 2 and r["time_s"]["min"] == 0.2 and r["time_s"]["max"] == 0.3
    assert r["wrong"] == 2 and r["group"] == "pair"


@pytest.mark.parametrize("members", [[0, 1], [0, 1, 2], [1, 3]])
def test_expected_results_match_the_collectives_computed_by_hand(members):
    torch = pytest.importorskip("torch")
    from bench.worker.comm import expected, pattern

    n, count = len(members), 300  # not a multiple of the pattern's period
    inputs = {r: pattern(torch, r, count) for r in members}
    total = sum(inputs.values())
    for me in members:
        assert torch.equal(expected(torch, "all_reduce", members, me, count), total)
        assert torch.equal(expected(torch, "all_gather", members, me, count), torch.cat([inputs[r] for r in members]))
        assert torch.equal(expected(torch, "broadcast", members, me, count), inputs[members[0]])
        big = sum(pattern(torch, r, n * count) for r in members)
        pos = members.index(me)
        assert torch.equal(expected(torch, "reduce_scatter", members, me, count), big[pos * count:(pos + 1) * count])
    # Values differ by rank and index, so a swapped chunk or a wrong rank is a mismatch.
    assert not torch.equal(pattern(torch, 0, count), pattern(torch, 1, count))
    assert not torch.equal(pattern(torch, 0, count), pattern(torch, 0, count, start=1))


def test_one_table_of_collectives_serves_the_figures_and_the_ranks():
    # Every op bench comm times has a busbw factor, an S and a defined exact result.
    assert collectives.MEASURED == ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    for op in collectives.MEASURED:
        c = collectives.get(op)
        assert sum(s.count for s in c.expected([0, 1, 2], 1, 8)) == (c.counts(8, 3)[1] or c.counts(8, 3)[0])
    assert collectives.get("reduce").busbw_factor(4) == 1.0 and not collectives.get("reduce").measured
    with pytest.raises(ValueError, match="unknown collective 'all_scatter'"):
        collectives.get("all_scatter")


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_the_check_compares_in_bounded_chunks_and_counts_every_wrong_value(op, monkeypatch):
    # At GPU sizes a whole expected tensor (and an int64 index of n x count) would not fit beside the buffers.
    torch = pytest.importorskip("torch")
    from bench.worker import comm as wc

    monkeypatch.setattr(wc, "CHUNK", 37)  # smaller than a segment, not a multiple of the period
    members, count = [0, 1, 2], 300
    for me in members:
        right = wc.expected(torch, op, members, me, count)
        assert wc.count_wrong(torch, right.clone(), op, members, me, count) == 0
        bad = right.clone()
        bad[[0, 100, -1]] += 1
        assert wc.count_wrong(torch, bad, op, members, me, count) == 3
    # The pattern is v(r, i) = (r + 1) + (i mod 128) for any start, built without an index tensor.
    idx = torch.arange(5, 5 + 1000)
    assert torch.equal(wc.pattern(torch, 2, 1000, start=5), (idx % 128 + 3).float())


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_each_collective_runs_on_a_real_group_by_its_current_name(op, one_rank_group):
    # torch 2.14 renamed all_gather_into_tensor and reduce_scatter_tensor: the old names still work but write a
    # FutureWarning into every rank's log of every `bench comm`. One rank: the result is the input, checked exactly.
    torch = pytest.importorskip("torch")
    from bench.worker import comm as wc

    _, work, out = wc._buffers(torch, op, 0, 1, 300, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wc._run_op(one_rank_group, op, work, out, None, 0)
    assert wc.count_wrong(torch, work if out is None else out, op, [0], 0, 300) == 0


def test_bench_comm_plans_like_bench_run_from_a_gpu_less_head_node(tmp_path, monkeypatch):
    # The nodes' inventory decides the device and the default sizes, not this (GPU-less) node. Their GPUs
    # cannot exist here: the inventory is the recorded T4 node, and the launch is captured, not run.
    from bench.cluster.hetero import verdict
    from bench.cluster.hostfile import HostSelection
    from bench.jobs import comm as job
    from tests.unit.test_hetero import node

    nodes = [dict(node(h, "nvidia-smi_t4x5.txt"), slots=[0]) for h in ("10.0.0.1", "10.0.0.2")]
    from bench.cluster.inventory import selected

    monkeypatch.setattr(job, "inspect_cluster",
                        lambda cfg, placement, quiet, **kw: (nodes, verdict([selected(n) for n in nodes])))
    seen = {}
    monkeypatch.setattr(job, "measure", lambda resources, launcher, device, **kw: seen.update(device=device, **kw))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on this node
    hf = tmp_path / "hf"
    hf.write_text("10.0.0.1 slots=1\n10.0.0.2 slots=1\n")
    job.run(job.CommConfig(out=str(tmp_path / "out")), HostSelection(hostfile=str(hf)), quiet=True)
    assert seen["device"] == "cuda" and max(seen["sizes"]) == 256 << 20
    assert seen["extra"]["verdict"]["gpus"] == 2


def test_sub_groups_get_the_runs_collective_timeout(monkeypatch):
    """bench comm's pairs and groups (dist.new_group) wait as long as the world group, not torch's 30 min."""
    import torch
    import torch.distributed as dist

    from bench.launch.plan import free_port
    from bench.worker import dist as worker_dist

    c10d = dist.distributed_c10d
    monkeypatch.setattr(c10d, "default_pg_timeout", c10d.default_pg_timeout)  # restored after the test
    monkeypatch.setattr(c10d, "default_pg_nccl_timeout", getattr(c10d, "default_pg_nccl_timeout", None))
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(k, v)
    plan = {"device": "cpu", "collective_timeout_s": 7, "master_addr": "127.0.0.1", "master_port": 0}
    world, rank, _local, device = worker_dist.init(plan, via_deepspeed=False)
    try:
        group = dist.new_group([0])
        assert (world, rank, device.type) == (1, 0, "cpu")
        assert group._get_backend(torch.device("cpu")).options._timeout.total_seconds() == 7
    finally:
        dist.destroy_process_group()
