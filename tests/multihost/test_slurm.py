"""`bench --launcher slurm` inside a real Slurm 22.05 allocation over the namespace hosts.

See slurm.py for the daemons and the settings that made them work. The
allocation's node names are the hosts' hostnames (node1..3); nothing here
resolves them, so torch's rendezvous is given node1's address.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core import results
from tests.conftest import FAST, REPO, one_json
from tests.faults import exit_at_import

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def test_srun_reaches_every_node(slurm):
    proc = slurm.run_in_allocation(["srun", "-N", "3", "hostname"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == slurm.nodes


def test_srun_s_words_for_a_task_a_signal_killed_name_it(slurm):
    """bench names the signal that killed a rank from its node launcher's words (bench.launch.exits): srun's."""
    from bench.launch import exits

    kill_one = 'if [ "$SLURM_PROCID" = 1 ]; then kill -9 $$; fi; sleep 3'
    proc = slurm.run_in_allocation(["srun", "-N", "2", "-n", "2", "sh", "-c", kill_one], nodes=2, timeout=120)
    assert proc.returncode != 0
    assert exits.parse((proc.stdout + proc.stderr).splitlines(), []) == {1: "SIGKILL"}, proc.stderr


def test_allocation_as_hosts(slurm):
    code = "import json; from bench.cluster.slurm import slurm_hosts; print(json.dumps(slurm_hosts()))"
    proc = slurm.run_in_allocation(["--ntasks-per-node=1", sys.executable, "-c", code], cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {n: 1 for n in slurm.nodes}


def test_probe_through_srun(slurm):
    proc = slurm.run_in_allocation([sys.executable, "-m", "bench", "probe", "--launcher", "slurm", "--json"],
                                   cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = one_json(proc.stdout)
    assert [n["host"] for n in doc["nodes"]] == slurm.nodes and doc["unreachable"] == {}
    assert [n["hostname"] for n in doc["nodes"]] == slurm.nodes


@pytest.mark.parametrize("launcher", ["slurm", "openmpi"])
def test_a_node_whose_probe_cannot_start_is_unreachable_and_the_others_answer(slurm, tmp_path, launcher):
    """node3's Python exits as it imports bench's probe (a broken install there): node3 unreachable, node1 and
    node2 probed, exit 1. srun's --kill-on-bad-exit, and mpirun's abort on a non-zero exit (its ranks' gather
    also waited in MPI_Init for the one that never came), made every node unreachable."""
    broken = slurm.nodes[2]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(exit_at_import("bench.cluster.probe", hostname=broken))
    hostfile = tmp_path / "hostfile"  # mpirun's hosts; srun's are the allocation's
    hostfile.write_text("".join(f"{n} slots=1\n" for n in slurm.nodes))
    env = dict(slurm.env, PYTHONPATH=os.pathsep.join([str(site), REPO]))  # every node sees it; node3 acts on it
    proc = slurm.run_in_allocation([sys.executable, "-m", "bench", "probe", "--launcher", launcher, "--json",
                                    *(["--hostfile", str(hostfile)] if launcher == "openmpi" else [])],
                                   cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = one_json(proc.stdout)
    assert [n["host"] for n in doc["nodes"]] == slurm.nodes[:2] and list(doc["unreachable"]) == [broken], doc
    assert [n["hostname"] for n in doc["nodes"]] == slurm.nodes[:2]


def test_bench_in_allocation(slurm, out_dir):
    # The sbatch recipe of docs/slurm.md: no hostfile, the allocation is the hostfile.
    # (--master-addr only because node names do not resolve on these test hosts.)
    argv = [sys.executable, "-m", "bench", "--launcher", "slurm", "--master-addr", slurm.addrs[0],
            "--dataset", "synthetic", "--steps", "20", "--json", *FAST, "--out", out_dir]
    # A value with commas, as NCCL's HCA and interface lists have: DeepSpeed's SlurmRunner would pass it in
    # `--export=ALL,K=V,...`, which srun splits at every comma.
    env = dict(slurm.env, NCCL_IB_HCA="mlx5_0,mlx5_1", NCCL_SOCKET_IFNAME="^lo,docker")
    proc = slurm.run_in_allocation(argv, cwd=REPO, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "ok" and rec["plan"]["launcher"] == "slurm"
    assert rec["figures"]["world_size"] == 3 and rec["figures"]["sanity"]["world_size_as_planned"]
    assert rec["provenance"]["hosts"] == slurm.nodes
    assert {(d["rank"], d["host"]) for d in rec["provenance"]["devices"]} == set(enumerate(slurm.nodes))
    assert rec["provenance"]["env"]["SLURM_NNODES"] == "3"
    # bench's own srun started the ranks, ending a step at once when one rank fails.
    # Each rank's node from the task list bench wrote (SLURM_HOSTFILE), not from Slurm's own order.
    assert rec["plan"]["command"][:6] == ["srun", "-n", "3", "--nodes", "3", "--distribution=arbitrary"]
    with open(os.path.join(rec["run_dir"], "slurm-tasks")) as f:
        assert f.read().split() == slurm.nodes
    assert "--kill-on-bad-exit=1" in rec["plan"]["command"]
    for rank in range(3):  # every rank, on every node, got the values whole
        with open(os.path.join(rec["run_dir"], "ranks", f"rank{rank}.json")) as f:
            got = json.load(f)["env"]
        assert got["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and got["NCCL_SOCKET_IFNAME"] == "^lo,docker", got
    # Allocation over: no job, no step left behind.
    assert slurm.run(["squeue", "-h", "-t", "PD,R"], timeout=15).stdout.strip() == ""


def _naming(text: str) -> list[int]:
    """PIDs on this machine (the hosts share its PID namespace) whose argv names text."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if os.fsencode(text) in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return pids


def test_sigkill_of_bench_leaves_no_step_behind(slurm, out_dir):
    """bench (inside salloc) SIGKILLed mid-run: no rank, srun or step of its run is left."""
    import glob
    import signal
    import time

    argv = ["salloc", "-N", "3", sys.executable, "-m", "bench", "--launcher", "slurm", "--master-addr",
            slurm.addrs[0], "--dataset", "synthetic", "--steps", "100000", "--no-eval", *FAST, "--out", out_dir]
    salloc = subprocess.Popen(argv, cwd=REPO, env=slurm.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 600
        while not glob.glob(os.path.join(out_dir, "*", "progress.json")):
            assert salloc.poll() is None and time.monotonic() < deadline, salloc.stderr.read()[-3000:]
            time.sleep(0.5)
        run_dir = os.path.dirname(glob.glob(os.path.join(out_dir, "*", "progress.json"))[0])
        bench_pids = [p for p in _naming(f"--out\0{out_dir}") if p != salloc.pid]
        assert len(bench_pids) == 1, bench_pids
        assert len(_naming(run_dir)) >= 4, _naming(run_dir)  # srun and a rank on each node
        os.kill(bench_pids[0], signal.SIGKILL)
        t0 = time.monotonic()
        while (_naming(run_dir) or salloc.poll() is None) and time.monotonic() - t0 < 60:
            time.sleep(0.5)
        assert _naming(run_dir) == [], "a process of the run is left 60 s after bench was SIGKILLed"
        assert salloc.poll() is not None
    finally:
        if salloc.poll() is None:
            salloc.kill()
            salloc.wait()
    assert slurm.run(["squeue", "-h", "-t", "PD,R"], timeout=15).stdout.strip() == ""
    print(f"\nslurm: bench SIGKILLed -> nothing left after {time.monotonic() - t0:.1f} s")
