"""bench.launch.node, run for real with stand-in ranks (tests/stand_in_rank.py): the variables DeepSpeed's launch.py
would give each rank, every rank's end said by its rank, a failed rank's peers stopped, SIGTERM obeyed."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from bench.launch import exits
from tests.conftest import REPO

pytestmark = pytest.mark.process


def _world(world: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(world).encode()).decode()


def _node(world: dict, out, *orders: str, node_rank: int = 0, launcher: str = "bench",
          independent: bool = False, accel: str | None = None, environ: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=REPO, **(environ or {}))
    if launcher == "bench":
        argv = [sys.executable, "-u", "-m", "bench.launch.node", f"--world-info={_world(world)}",
                f"--node-rank={node_rank}", "--master-addr=10.0.0.1", "--master-port=29501",
                *(["--independent"] if independent else []), *([f"--accel={accel}"] if accel else [])]
    else:  # DeepSpeed's own, as its runner started it before
        argv = [sys.executable, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={_world(world)}",
                f"--node_rank={node_rank}", "--master_addr=10.0.0.1", "--master_port=29501", "--module",
                "--enable_each_rank_log=None"]
    return subprocess.Popen([*argv, "tests.stand_in_rank", str(out), *orders], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _seen(out) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(out.iterdir())}


def _both(tmp_path, world: dict, node_rank: int) -> dict[str, dict]:
    seen = {}
    for launcher in ("bench", "deepspeed"):
        out = tmp_path / f"{launcher}-{node_rank}"
        out.mkdir()
        proc = _node(world, out, node_rank=node_rank, launcher=launcher)
        text, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, text
        seen[launcher] = _seen(out)
    return seen


def test_each_rank_gets_what_deepspeeds_launch_py_gives_it_but_its_place_on_the_node(tmp_path):
    """Node b of a:[1] b:[0,2]: both launchers give ranks 1 and 2 the same variables, but for LOCAL_RANK.
    launch.py 0.19.8 numbers a node's ranks global rank % the node's rank count: rank 1 gets LOCAL_RANK 1 and so
    GPU 2, where bench's plan (bench.core.placement) puts it on slot 0, and a per-GPU figure would be another
    GPU's. The node launcher gives each rank its place on the node, as the plan does; where every node runs the
    same count the two numberings agree (rank % n is then the place)."""
    seen = _both(tmp_path, {"a": [1], "b": [0, 2]}, node_rank=1)
    assert seen["bench"]["rank1.json"] == {
        "RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_SIZE": "2", "CROSS_RANK": "1", "CROSS_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29501", "CUDA_VISIBLE_DEVICES": "0,2",
        "ROCR_VISIBLE_DEVICES": None, "HIP_VISIBLE_DEVICES": None}
    assert [seen["bench"][f"rank{r}.json"]["LOCAL_RANK"] for r in (1, 2)] == ["0", "1"]
    assert [seen["deepspeed"][f"rank{r}.json"]["LOCAL_RANK"] for r in (1, 2)] == ["1", "0"]
    for r in (1, 2):
        ours, theirs = seen["bench"][f"rank{r}.json"], seen["deepspeed"][f"rank{r}.json"]
        assert {k: v for k, v in ours.items() if k != "LOCAL_RANK"} == \
            {k: v for k, v in theirs.items() if k != "LOCAL_RANK"}


def test_ranks_on_an_amd_node_get_rocr_visible_devices_and_no_other_vendors_variable(tmp_path):
    """--accel amd (the plan's, from the nodes' inventories): the slots are ROCR_VISIBLE_DEVICES, the AMD
    backend's variable (bench/data/accelerators.json); a CUDA_ or HIP_VISIBLE_DEVICES this shell had is not
    passed on, since HIP would narrow ROCR's list again by it. Without --accel, CUDA_VISIBLE_DEVICES (above)."""
    proc = _node({"a": [1, 3]}, tmp_path, accel="amd", environ={"CUDA_VISIBLE_DEVICES": "5",
                                                              "HIP_VISIBLE_DEVICES": "7"})
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, text
    got = {k: v for k, v in _seen(tmp_path)["rank1.json"].items() if k.endswith("_VISIBLE_DEVICES")}
    assert got == {"CUDA_VISIBLE_DEVICES": None, "ROCR_VISIBLE_DEVICES": "1,3", "HIP_VISIBLE_DEVICES": None}


def test_an_unknown_accel_is_one_line_and_starts_no_rank(tmp_path):
    proc = _node({"a": [0]}, tmp_path, accel="tpu")
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--accel: no accelerator backend 'tpu'" in text, text
    assert "Traceback" not in text and list(tmp_path.iterdir()) == []


def test_a_rank_killed_by_a_signal_is_named_and_its_peer_stopped(tmp_path):
    t0 = time.monotonic()
    proc = _node({"localhost": [0, 1]}, tmp_path, "0=sleep:60", "1=kill:SIGKILL")
    text, _ = proc.communicate(timeout=90)
    assert time.monotonic() - t0 < 50, text  # rank 0 was stopped, not waited for
    assert proc.returncode == 128 + signal.SIGKILL, text
    started = [re.search(r"rank (\d+) \(local rank \d+\) pid (\d+) started", w) for w in text.splitlines()]
    pids = {int(m[2]): int(m[1]) for m in started if m}
    assert sorted(pids.values()) == [0, 1], text
    assert f"rank 1 pid {[p for p, r in pids.items() if r == 1][0]} ended by SIGKILL" in text
    # Its peer's end is the launcher's doing, said so, and not taken for a cause.
    assert "rank 0 pid" in text and "stopped by this launcher (after rank 1 failed): ended by SIGTERM" in text
    assert exits.parse(text.splitlines(), [(r, "vm", p) for p, r in pids.items()]) == {1: "SIGKILL"}
    assert exits.parse(text.splitlines(), [(1, "vm", 1)]) == {}  # another PID recorded for rank 1: not its line


def test_a_rank_that_exits_non_zero_is_the_nodes_status(tmp_path):
    proc = _node({"localhost": [0, 1]}, tmp_path, "0=exit:3", "1=sleep:60")
    text, _ = proc.communicate(timeout=90)
    assert proc.returncode == 3, text
    assert "exited with 3" in text and "stopped by this launcher (after rank 0 failed)" in text


def test_independent_ranks_run_on_when_one_fails_and_the_node_ends_with_its_status(tmp_path):
    """--independent (bench validate's per-GPU run): rank 0 exits 3 at once, rank 1 still runs to its end."""
    t0 = time.monotonic()
    proc = _node({"localhost": [0, 1]}, tmp_path, "0=exit:3", "1=sleep:3", independent=True)
    text, _ = proc.communicate(timeout=90)
    assert proc.returncode == 3 and time.monotonic() - t0 >= 3, text
    assert re.search(r"rank 0 pid \d+ exited with 3", text) and re.search(r"rank 1 pid \d+ exited with 0", text), text
    assert "stopped by this launcher" not in text, text


def _mpirun_alone(out, *orders: str) -> subprocess.CompletedProcess:
    """Three stand-in ranks through Open MPI's mpirun as bench starts an independent job (bench.launch.openmpi):
    not aborted on a non-zero exit, each rank under the node launcher's --alone."""
    env = dict(os.environ, PYTHONPATH=REPO, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = ["mpirun", "-n", "3", "--oversubscribe", "--bind-to", "none", "--mca", "orte_abort_on_non_zero_status",
            "0", sys.executable, "-u", "-m", "bench.launch.node", "--alone", "tests.stand_in_rank", str(out), *orders]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_under_mpirun_each_rank_ends_as_itself_and_the_others_run_on(tmp_path):
    """Rank 1 exits 3, rank 2 is SIGKILLed, rank 0 sleeps on: mpirun ends once rank 0 has (without the node
    launcher between, Open MPI 4.1.4 waits forever for the SIGKILLed rank: tried), and its output names each end
    in the node launcher's words, the signal where bench.launch.exits reads it."""
    proc = _mpirun_alone(tmp_path, "0=sleep:2", "1=exit:3", "2=kill:SIGKILL")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text  # mpirun says nothing of its ranks' statuses when told not to abort
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json", "rank1.json", "rank2.json"], text
    pids = {int(m[1]): int(m[2]) for m in re.finditer(r"rank (\d+) \(local rank \d+\) pid (\d+) started", text)}
    assert sorted(pids) == [0, 1, 2], text
    assert f"rank 0 pid {pids[0]} exited with 0" in text and f"rank 1 pid {pids[1]} exited with 3" in text, text
    assert exits.parse(text.splitlines(), [(r, "vm", p) for r, p in pids.items()]) == {2: "SIGKILL"}


def test_sigterm_stops_every_rank(tmp_path):
    proc = _node({"localhost": [0, 1]}, tmp_path, "0=sleep:60", "1=sleep:60")
    deadline = time.monotonic() + 30
    while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:  # both ranks running
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, text
    assert text.count("stopped by this launcher (SIGTERM): ended by SIGTERM") == 2, text
    assert text.rstrip().endswith("stopped by SIGTERM"), text


def test_a_process_is_signalled_only_while_it_is_the_one_recorded():
    """stop() records each rank's tree with start times and signals only those same processes: a PID reaped and
    reused within the grace is left alone (launch.py checks the same through psutil)."""
    from bench.launch import node

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (started,) = node._tree(child.pid).values()
        node._signal({child.pid: str(int(started) + 1)}, signal.SIGKILL)  # another process under that PID
        time.sleep(0.2)
        assert child.poll() is None
        node._signal({child.pid: started}, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
