"""One name per idea across subcommands; an old name still works, hidden, and says once what replaced it.

    --num-gpus (hosts)            -> --gpus, as bench run's ranks per node (the same slots)
    --values (sweep)              -> --micro-batches / --grad-accums / --strategies, as bench tune names them
    --launcher ssh (probe)        -> --launcher pdsh: bench probe takes bench run's launcher names
    --timeout (probe)             -> --probe-timeout (--timeout is a job's seconds without progress elsewhere)
    --warmup, --timing-warmup (comm) -> --warmup-iters: iterations, where run's --timing-warmup counts steps
    --health-since (probe)        -> --since, as bench validate's (ISO 8601 or Unix seconds, as there)
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_bad_input, cli


def parsed(*argv: str):
    from bench.cli import build_parser

    return build_parser().parse_args(list(argv))


def only_note(proc, line: str) -> None:
    notes = [ln for ln in proc.stderr.splitlines() if " is now " in ln]
    assert notes == [line], proc.stderr


def test_sweep_takes_num_gpus_as_gpus_and_says_so_once():
    base = ("sweep", "strong", "--hostfile", "hostfiles/vector", "--dataset", "synthetic", "--dry-run", "--json")
    old, new = cli(*base, "--num-gpus", "1"), cli(*base, "--gpus", "1")
    assert old.returncode == new.returncode == 0, old.stderr
    assert json.loads(old.stdout) == json.loads(new.stdout)
    only_note(old, "bench sweep: --num-gpus is now --gpus")
    assert " is now " not in new.stderr


def test_an_old_name_given_twice_is_said_once():
    proc = cli("hosts", "--hostfile", "hostfiles/vector", "--num-gpus", "2", "--num-gpus", "1", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["world_size"] == 4
    only_note(proc, "bench hosts: --num-gpus is now --gpus")


def test_hosts_and_run_name_the_gpu_count_alike():
    hosts = cli("hosts", "--hostfile", "hostfiles/vector", "--gpus", "1", "--json")
    assert json.loads(hosts.stdout)["resources"] == {f"vector-t4-0{i}": [0] for i in range(1, 5)}
    assert_bad_input(cli("hosts", "--hostfile", "hostfiles/vector", "--gpus", "9"),
                     "bench hosts: error: --gpus: 9 asked but host 'vector-t4-01' has 8 slot(s)")
    assert_bad_input(cli("run", "--hostfile", "hostfiles/vector", "--gpus", "9", "--dataset", "synthetic",
                         "--dry-run"), "bench run: error: --gpus: 9 asked")


def test_sweep_values_still_work_as_the_suites_list():
    base = ("sweep", "batch", "--gpus", "2", "--dataset", "synthetic", "--dry-run", "--json")
    old, new = cli(*base, "--values", "8,16"), cli(*base, "--micro-batches", "8,16")
    assert old.returncode == new.returncode == 0, old.stderr
    assert json.loads(old.stdout) == json.loads(new.stdout)
    only_note(old, "bench sweep: --values is now --micro-batches (batch, paper), --grad-accums (accum) or "
                   "--strategies (zero, memory)")


@pytest.mark.parametrize("suite,option,value", [("accum", "--grad-accums", "2"), ("zero", "--strategies", "1"),
                                                ("memory", "--strategies", "zero1")])
def test_each_suite_takes_its_list_by_its_name(suite, option, value):
    proc = cli("sweep", suite, "--gpus", "2", "--dataset", "synthetic", option, value, "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["points"]) >= 1


def test_a_list_the_suite_does_not_sweep_is_refused_naming_the_one_it_does():
    assert_bad_input(cli("sweep", "accum", "--micro-batches", "16", "--dry-run"),
                     "bench sweep: error: --micro-batches: the accum suite does not take it (it sweeps --grad-accums)")
    assert_bad_input(cli("sweep", "strong", "--strategies", "zero1", "--dry-run"),
                     "--strategies: the strong suite does not take it (it sweeps no list of values)")


def test_the_zero_suite_takes_tunes_spelling_of_a_strategy():
    from bench.experiments.pool import Pool
    from bench.experiments.suite_options import SuiteOptions
    from bench.experiments.suites import plan
    from bench.core.config import RunConfig

    pool = Pool(resources={"localhost": [0, 1]}, hostfile=False, device="cpu")
    base = RunConfig(dataset="synthetic")
    short = plan("zero", base, SuiteOptions(strategies=("2+offload", "0"), precisions=("fp32",)), pool)
    tune = plan("zero", base, SuiteOptions(strategies=("zero2+offload", "zero0"), precisions=("fp32",)), pool)
    assert [p.id for p in short] == [p.id for p in tune] == ["zero/stage=2+offload/fp32/gpus=2",
                                                             "zero/stage=0/fp32/gpus=2"]


def test_probe_takes_bench_runs_launcher_names():
    assert parsed("probe", "--launcher", "pdsh").launcher == "pdsh"
    assert parsed("probe").launcher is None   # the field's default: pdsh
    proc = cli("probe", "--launcher", "ssh", "--hostfile", "hostfiles/vector", "--probe-timeout", "0")
    assert proc.stderr.splitlines()[0] == "bench probe: --launcher ssh is now --launcher pdsh"
    assert proc.stderr.splitlines()[1] == "bench probe: error: --probe-timeout: must be > 0, not 0.0"
    assert_bad_input(cli("probe", "--launcher", "local", "--hostfile", "hostfiles/vector"),
                     "bench probe: error: --launcher local: the hostfile selects 4 hosts; use pdsh, openmpi or slurm")


@pytest.mark.parametrize("argv,dest,value,note", [
    (["probe", "--timeout", "5"], "timeout", 5.0, "bench probe: --timeout is now --probe-timeout"),
    (["comm", "--warmup", "2"], "warmup", 2, "bench comm: --warmup is now --warmup-iters"),
    (["comm", "--timing-warmup", "2"], "warmup", 2, "bench comm: --timing-warmup is now --warmup-iters"),
    (["run", "--num-gpus", "3"], "gpus", 3, "bench run: --num-gpus is now --gpus"),
    (["tune", "--num-gpus", "3"], "gpus", 3, "bench tune: --num-gpus is now --gpus"),
    (["probe", "--health-since", "1764669600"], "since", 1764669600.0, "bench probe: --health-since is now --since"),
])
def test_old_names_set_the_new_option(argv, dest, value, note, capsys):
    assert getattr(parsed(*argv), dest) == value
    assert capsys.readouterr().err.strip() == note


@pytest.mark.parametrize("command,old", [("hosts", "--num-gpus"), ("run", "--num-gpus"), ("probe", "--timeout"),
                                         ("comm", "--warmup"), ("sweep", "--values"),
                                         ("probe", "--health-since")])
def test_old_names_are_not_in_help(command, old):
    assert old not in cli(command, "--help").stdout.replace("--collective-timeout", "")



@pytest.mark.parametrize("command", ["probe", "validate"])
def test_since_reads_the_same_times_in_probe_and_validate(command):
    from datetime import datetime

    assert parsed(command, "--since", "2026-12-02T10:00").since == datetime(2026, 12, 2, 10, 0).timestamp()
    assert parsed(command, "--since", "2026-12-02T10:00+00:00").since == 1796205600.0
    assert parsed(command, "--since", "1764669600.5").since == 1764669600.5
    assert_bad_input(cli(command, "--since", "yesterday"),
                     f"bench {command}: error: argument --since: 'yesterday' is not a time (ISO 8601, "
                     "e.g. 2026-12-02T10:00, or Unix seconds)")


def test_probe_refuses_health_options_without_health():
    assert_bad_input(cli("probe", "--local", "--since", "1764669600"),
                     "bench probe: error: --since: reads a node's health; add --health")
    assert_bad_input(cli("probe", "--local", "--dcgm", "1"), "bench probe: error: --dcgm: reads a node's health")


def test_the_remote_probes_health_request_reads_back_as_sent():
    """What bench probe asks of every node (over ssh, mpirun or srun) is parsed there by the same options."""
    from bench.cluster.inventory import HealthAsk, ProbeConfig
    from bench.core.options import from_args

    asked = HealthAsk(since=1764669600.25, dcgm_level=2, folders=("/scratch", "/tmp"))
    args = parsed("probe", "--local", "--json", *asked.argv())
    assert from_args(ProbeConfig, args).health_ask() == asked
