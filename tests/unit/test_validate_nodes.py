"""Each node's verdict and bench validate's exit status; the allocation's GPUs; the lines GPUs are judged by;
Slurm's drain and resume rules (real `scontrol` outputs recorded from the suite's Slurm: tests/fixtures/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.analysis import peer_lines
from bench.cluster import slurm
from bench.validate.state import CLUSTER, Check
from bench.validate.verdicts import exit_status, node_verdicts, result

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RES = {"n1": [0, 1], "n2": [0, 1]}


def _c(check, node, status, host=None, gpu=None, reason="", action=""):
    return Check(check, node, status, reason=reason, host=host, gpu=gpu, action=action)


def _healthy():
    return [_c("throughput", f"{h}:{s}", "PASS", h, s) for h in RES for s in RES[h]] + \
        [_c("intra-node", h, "PASS", h) for h in RES] + [_c("training", CLUSTER, "PASS")]


def test_every_node_judged_and_passing_is_healthy_and_exits_0():
    nodes = node_verdicts(_healthy(), RES)
    assert {h: n["verdict"] for h, n in nodes.items()} == {"n1": "healthy", "n2": "healthy"}
    assert exit_status(nodes, _healthy()) == 0 and result(_healthy()) == "PASS"


def test_a_warn_keeps_the_node_in_service_as_degraded_and_exits_0():
    checks = _healthy() + [_c("health", "n2", "WARN", "n2", reason="ib-errors", action="watch")]
    nodes = node_verdicts(checks, RES)
    assert nodes["n2"]["verdict"] == "degraded" and nodes["n2"]["action"] == "watch"
    assert exit_status(nodes, checks) == 0 and result(checks) == "WARN"


def test_a_gpus_fail_drains_its_node_with_the_rows_action_and_exits_1():
    checks = _healthy() + [_c("health", "n2:1", "FAIL", "n2", 1, "row-remap-pending", "reset-gpu"),
                           _c("numerics", "n2:1", "SKIP", "n2", 1, "left out after a FAIL in health")]
    nodes = node_verdicts(checks, RES)
    assert nodes["n2"]["verdict"] == "drain" and nodes["n2"]["action"] == "reset-gpu"
    assert nodes["n2"]["findings"][0] == {"check": "health", "gpu": 1, "status": "FAIL",
                                          "reason": "row-remap-pending", "action": "reset-gpu"}
    assert nodes["n1"]["verdict"] == "healthy" and exit_status(nodes, checks) == 1


def test_a_check_that_did_not_reach_a_node_makes_it_unknown_not_healthy_and_exits_3():
    checks = _healthy() + [_c("numerics", "n2:0", "ERROR", "n2", 0, "could not be measured: no report"),
                           _c("intra-node", "n2", "SKIP", "n2", None, "left out after an ERROR in numerics")]
    nodes = node_verdicts(checks, RES)
    assert nodes["n2"]["verdict"] == "unknown" and nodes["n1"]["verdict"] == "healthy"
    assert [m["check"] for m in nodes["n2"]["not_checked"]] == ["numerics", "intra-node"]
    assert exit_status(nodes, checks) == 3 and result(checks) == "ERROR"


def test_a_cluster_check_that_could_not_run_leaves_every_node_still_in_unknown():
    checks = _healthy()[:-1] + [_c("training", CLUSTER, "ERROR", reason="the data-parallel run failed")]
    nodes = node_verdicts(checks, RES)
    assert {n["verdict"] for n in nodes.values()} == {"unknown"} and exit_status(nodes, checks) == 3


def test_a_cluster_check_that_failed_exits_1_though_it_names_no_node():
    checks = _healthy()[:-1] + [_c("training", CLUSTER, "FAIL", reason="loss is not falling")]
    nodes = node_verdicts(checks, RES)
    assert {n["verdict"] for n in nodes.values()} == {"healthy"} and exit_status(nodes, checks) == 1


def test_a_drain_outranks_an_unknown_and_says_what_else_was_not_checked():
    checks = _healthy() + [_c("health", "n1", "FAIL", "n1", reason="ib-port-down", action="reseat"),
                           _c("numerics", "n1:0", "ERROR", "n1", 0, "could not be measured")]
    nodes = node_verdicts(checks, RES)
    assert nodes["n1"]["verdict"] == "drain" and nodes["n1"]["not_checked"][0]["check"] == "numerics"
    assert exit_status(nodes, checks) == 1


@pytest.mark.parametrize("name,gpus", [
    ("scontrol-show-job-d_gpus-per-node-2_3-nodes.txt", {"node1": 2, "node2": 2, "node3": 2}),
    ("scontrol-show-job-d_gres-gpu-1_3-nodes.txt", {"node1": 1, "node2": 1, "node3": 1}),
    ("scontrol-show-job-d_gpus-3-over-2-nodes.txt", {"node1": 2, "node2": 1}),
    ("scontrol-show-job-d_cpu-only_ntasks-per-node-2.txt", {}),
])
def test_the_gpus_a_job_holds_on_each_node_are_read_from_scontrol(name, gpus):
    expand = {"node[1-3]": ["node1", "node2", "node3"], "node[1-2]": ["node1", "node2"]}
    assert slurm.gpus_from_job((FIXTURES / name).read_text(), lambda nl: expand.get(nl, [nl])) == gpus


def test_typed_and_sparse_gres_count_every_index():
    text = "   Nodes=a CPU_IDs=0-7 Mem=0 GRES=gpu:h100:3(IDX:0,2-3),nic:1(IDX:0)\n"
    assert slurm.gpus_from_job(text, lambda nl: [nl]) == {"a": 3}


@pytest.mark.parametrize("name,state,reason", [
    ("scontrol-show-node_idle.txt", "IDLE", ""),
    ("scontrol-show-node_drained-by-bench.txt", "IDLE+DRAIN",
     "bench validate: numerics (GPU 0): differs from 4 peer(s) from step 1"),
    ("scontrol-show-node_drained-by-hand.txt", "IDLE+DRAIN", "fan replaced, waiting on vendor"),
])
def test_a_nodes_state_and_whole_reason_are_read_from_scontrol(name, state, reason):
    assert slurm.parse_node((FIXTURES / name).read_text()) == (state, reason)


def test_only_a_reason_bench_wrote_is_one_resume_may_undo_and_it_names_the_check_that_drained():
    _, mine = slurm.parse_node((FIXTURES / "scontrol-show-node_drained-by-bench.txt").read_text())
    _, theirs = slurm.parse_node((FIXTURES / "scontrol-show-node_drained-by-hand.txt").read_text())
    assert mine.startswith(slurm.REASON_PREFIX) and not theirs.startswith(slurm.REASON_PREFIX)
    assert slurm.drained_for(mine) == "numerics" and slurm.drained_for(theirs) is None


def test_in_a_prolog_bench_neither_launches_steps_nor_calls_scontrol():
    job = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert slurm.in_allocation(job) and not slurm.in_prolog(job)
    prolog = {**job, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
    assert not slurm.in_allocation(prolog) and slurm.in_prolog(prolog)
    assert slurm.in_prolog({"SLURM_SCRIPT_CONTEXT": "epilog_slurmd"})


def test_derived_lines_pass_identical_gpus_and_fail_one_at_60_percent_of_its_peers():
    peers = [155.0, 154.0, 156.5, 153.0, 157.0, 155.5]
    lines = peer_lines.derive(peers + [62.0], ses=[0.01] * 7)
    assert lines.fail == pytest.approx(0.10) and lines.noise < 0.10  # tight: datacentre GPUs agree
    assert all(peer_lines.judge(x, lines)[0] == "PASS" for x in peers)
    assert peer_lines.judge(62.0, lines)[0] == "FAIL"                 # 60% below: costs the job 60%
    assert peer_lines.judge(0.93 * lines.median, lines)[0] == "WARN"  # past the noise, under the straggler line
    assert "straggler line 10%" in lines.describe()


def test_derived_lines_widen_with_the_noise_bench_sees_but_not_for_a_shift_every_gpu_shares():
    noisy = peer_lines.derive([50.0, 42.0, 58.0, 47.0, 55.0, 39.0], ses=[0.03] * 6)
    assert noisy.noise > 0.2 and noisy.fail == noisy.noise and "robust spread" in noisy.how
    assert peer_lines.judge(0.75 * noisy.median, noisy)[0] == "PASS"  # within what these figures move
    shifted = peer_lines.derive([50.0, 51.0, 49.0], rounds=[[50.0, 25.0], [51.0, 25.5], [49.0, 24.5]])
    assert shifted.noise < 0.1  # the second round halved every GPU: no GPU's own spread
    assert peer_lines.derive([50.0, 20.0]) is None  # two GPUs cannot say which one is off


def test_a_wide_spread_never_sets_a_line_a_gpu_at_a_tenth_of_its_peers_passes():
    # Six healthy CPU ranks on two cores, as a Slurm validate in the suite measured them on 2026-12-03 (images/s,
    # and each one's relative standard error of its mean step). Their robust spread is 36% in log ratio; a linear
    # line from it was 111% of the median, where no figure can FAIL. On the log scale it is 67%.
    healthy = [112.6, 144.1, 168.2, 242.9, 199.7, 236.0]
    ses = [0.155, 0.181, 0.176, 0.182, 0.21, 0.189]
    slowed = 0.12 * 184.0  # a GPU at 12% of the median speed
    lines = peer_lines.derive(healthy + [slowed], ses=ses + [0.05])
    assert 0.5 < lines.noise < 0.8 and "robust spread" in lines.how
    assert all(peer_lines.judge(x, lines)[0] == "PASS" for x in healthy)
    assert peer_lines.judge(slowed, lines)[0] == "FAIL"
    for n in (1, 2, 3):  # peers spread over 10^12 and more: the line still stays above zero speed
        wide = peer_lines.derive([1.0, 10.0 ** n, 10.0 ** -n, 10.0 ** (2 * n), 10.0 ** (-2 * n)])
        assert wide.noise < 1.0


def test_small_spreads_set_the_same_line_on_either_scale():
    # For the spreads of identical datacentre GPUs, a line on the log scale is the linear one within a few
    # hundredths of itself (here 5.2% against 5.3%): where GPUs agree, nothing changes.
    peers = [100.0, 101.5, 98.8, 100.7, 99.2, 102.0, 97.9]
    lines = peer_lines.derive(peers)
    devs = [x / lines.median - 1 for x in peers]
    linear = 3 * 1.4826 * sorted(abs(d) for d in devs)[len(devs) // 2]
    assert lines.noise == pytest.approx(linear, rel=0.03)


def test_mpiruns_tagged_output_is_cut_at_every_tag_not_at_line_starts():
    """Two ranks' pieces can meet on one line (seen from Open MPI 4.1.4's --tag-output in the preflight here:
    '{...}[1,0]<stdout>:' on one line): each rank's JSON is put back together from its own pieces."""
    from bench.cluster.probe_launch import _by_tag

    out = ('[1,0]<stdout>:{"hostname": "node1", "v": 1}[1,1]<stdout>:{"hostname": "no\n'
           '[1,1]<stdout>:de2"}\n[1,0]<stdout>:\n[1,2]<stderr>:a warning\n[1,2]<stdout>:{"hostname": "node3"}\n')
    assert _by_tag(out) == {0: '{"hostname": "node1", "v": 1}', 1: '{"hostname": "node2"}',
                            2: '{"hostname": "node3"}'}


def test_a_matmuls_own_noise_is_how_close_its_next_iterations_come_to_its_best():
    from bench.validate.numerics import best_noise

    assert best_noise({"times_s": [1.0, 1.01, 1.02, 1.02, 1.03, 2.0]}) == pytest.approx(0.03)
    assert best_noise({"times_s": [1.0]}) == 0.0 and best_noise({}) == 0.0


def _matmul_rows(device: str, rates: list[float], again: list[float] | None = None,
                 reasons: dict | None = None) -> dict[str, str]:
    """bench.validate.numerics._matmul over 1-GPU hosts of one model, each rank's iterations within 0.8% of its best
    (the healthy validate's own spread that set a 3% line)."""
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import numerics
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    hosts = [f"n{i}" for i in range(len(rates))]
    v = Validation(ValidateConfig(), HostSelection(), {h: [0] for h in hosts}, references.load(), "/nonexistent")
    v.device = device
    ok = [{"key": f"{h}:0", "host": h, "slot": 0, "matmul": {"flops_per_s": r, "dtype": "fp32", "n": 1024,
                                                              "times_s": [1.0, 1.002, 1.004, 1.006, 1.008, 1.01]}}
          for h, r in zip(hosts, rates)]
    timed = []

    def second(named: list[str]) -> list[dict]:  # the second launch's reports, as the first's: again's rates
        timed.append(named)
        return [{**r, "status": "ok", "matmul": {**r["matmul"], "flops_per_s": x}} for r, x in zip(ok, again)]
    numerics._matmul(v, ok, 0.0, second if again is not None else None)
    if reasons is not None:
        reasons.update({c.node: c.reason for c in v.checks if c.check == "matmul"}, timed=timed)
    return {c.node: c.status for c in v.checks if c.check == "matmul"}


def test_a_cpu_ranks_matmul_4_percent_under_its_peers_is_noise_and_a_third_under_fails():
    """One healthy quick validate in 20 WARNed a CPU rank's matmul at -4% against a 3% line drawn from its own
    iterations (benchmarks/healthy_validates.py): on CPU ranks sharing cores the host clock's floor, 10%, holds."""
    healthy = [1.66e11, 1.65e11, 1.59e11]
    assert _matmul_rows("cpu", healthy) == dict.fromkeys(("n0:0", "n1:0", "n2:0"), "PASS")
    assert _matmul_rows("cuda", healthy)["n2:0"] == "WARN", "a GPU's matmul keeps its tight line"
    assert _matmul_rows("cpu", [1.66e11, 1.65e11, 1.10e11])["n2:0"] == "FAIL"


def test_a_matmul_fail_is_timed_again_and_only_slow_in_both_fails():
    """6 CPU ranks on 2 shared cores through mpirun FAILed a healthy rank's one timing at -46% against a 12% line
    (a clean-clone run, 2026-12-07): one starved window. The named GPUs are timed once more, each keeps its faster
    matmul: the starved one PASSes on its second timing; one slow in both still FAILs, a GPU's as a CPU rank's; one
    whose second timing gave nothing keeps its first (FAIL, said); and nothing FAILed is not timed again."""
    healthy, starved = [1.66e11, 1.65e11, 1.64e11, 1.63e11, 1.62e11, 1.61e11], 0.54 * 1.64e11
    first = healthy[:5] + [starved]
    why: dict = {}
    assert _matmul_rows("cpu", first, again=healthy, reasons=why)["n5:0"] == "PASS", why
    assert why["timed"] == [["n5:0"]] and "timed twice" in why["n5:0"], why
    assert _matmul_rows("cpu", first)["n5:0"] == "FAIL", "one timing alone: the FAIL the run saw"
    for device in ("cpu", "cuda"):
        assert _matmul_rows(device, first, again=healthy[:5] + [starved * 1.02])["n5:0"] == "FAIL", device
    why = {}
    assert _matmul_rows("cpu", first, again=[], reasons=why)["n5:0"] == "FAIL" and "gave no figure" in why["n5:0"]
    why = {}
    assert set(_matmul_rows("cpu", healthy, again=[1.0] * 6, reasons=why).values()) == {"PASS"}
    assert why["timed"] == []
