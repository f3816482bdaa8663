"""`bench run` across real hosts (netns + sshd, see netns.py) with pdsh and openmpi.

Each host is a network namespace with its own hostname (node1..3) that
shares this machine's filesystem (like NFS): the run dir and the venv are
the same path everywhere. bench runs with the cluster's env: the ssh wrapper
first on PATH and GLOO_SOCKET_IFNAME=vb0 (the hosts' interface).
"""

from __future__ import annotations

import glob
import os

import pytest

from bench.core import results
from tests import hostile
from tests.conftest import FAST, bench, one_json, reaped

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def _rank_pids(run_dir: str) -> list[int]:
    pids = []
    for path in glob.glob(os.path.join(run_dir, "ranks", "pid-*")):
        with open(path) as f:
            pids.append(int(f.read().split()[1]))
    return pids


def _still_running(pid: int, run_dir: str) -> bool:
    """All namespaces share our PID namespace: a rank that outlived the run shows here."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.fsencode(run_dir) in f.read()
    except OSError:
        return False


SHAPES: dict[str, object] = {}


def _shape(x):
    """The keys of a record's figures, all the way down (what the figures are, not their values)."""
    if isinstance(x, dict):
        return {k: _shape(v) for k, v in x.items()}
    return [_shape(x[0])] if isinstance(x, list) and x and isinstance(x[0], dict) else None


@pytest.mark.parametrize("launcher", ["pdsh", "openmpi"])
def test_three_hosts(cluster, out_dir, launcher):
    # pdsh's run has a stranger at its hub all along (tests/hostile.py: issue 46); openmpi's is the same run without.
    stranger = hostile.Stranger(os.path.join(out_dir, "*", "hub.json")) if launcher == "pdsh" else None
    if stranger is not None:
        stranger.start()
    proc = bench("--hostfile", str(cluster.hostfile), "--launcher", launcher, "--dataset", "synthetic",
                 "--steps", "20", "--json", *FAST, "--out", out_dir, env=cluster.env, timeout=600)
    if stranger is not None:
        stranger.stop.set()
        stranger.join(60)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    SHAPES[launcher] = _shape(rec["figures"])
    if stranger is not None:
        assert len(stranger.launches) == 1, stranger.launches
        print(f"\nstranger at the hub: {hostile.changed_nothing(stranger.launches[0])}")
    if len(SHAPES) == 2:
        assert SHAPES["pdsh"] == SHAPES["openmpi"]
    assert rec["status"] == "ok" and rec["plan"]["launcher"] == launcher
    assert rec["plan"]["resources"] == {h: [0] for h in cluster.hosts}
    assert rec["figures"]["world_size"] == 3 and rec["figures"]["sanity"]["world_size_as_planned"]
    assert rec["provenance"]["hosts"] == cluster.hostnames
    # One rank per host, each on its own node.
    assert {(d["rank"], d["host"]) for d in rec["provenance"]["devices"]} == set(enumerate(cluster.hostnames))
    run_dir = rec["run_dir"]
    for r in range(3):
        assert os.path.isfile(os.path.join(run_dir, "logs", f"rank{r}.log")), r
    # Every rank's environment came through the env file, not the remote login's.
    with open(os.path.join(run_dir, ".deepspeed_env")) as f:
        env_file = dict(line.rstrip("\n").split("=", 1) for line in f)
    assert env_file["GLOO_SOCKET_IFNAME"] == "vb0"
    # Each host's vb0 counters, read by its rank around the steady steps, beside what the algorithm sent.
    wire = rec["figures"]["comm"]["wire"]
    assert [(h["ranks"], sorted(h["nic"])) for h in wire["per_host"]] == [(1, ["vb0"])] * 3, wire
    assert 0.99 <= wire["over_sent"] <= 1.10, wire
    pids = _rank_pids(run_dir)
    assert len(pids) == 3
    assert not [p for p in pids if _still_running(p, run_dir)]


def test_openmpi_tells_mpirun_the_ranks_interface(cluster, out_dir):
    proc = bench("--hostfile", str(cluster.hostfile), "--launcher", "openmpi", "--dry-run", "--dataset", "synthetic", "--out", out_dir,
                 env=cluster.env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    argv = one_json(proc.stdout)["plan"]["command"]
    assert argv[0] == "mpirun"
    # DeepSpeed's default would be `btl_tcp_if_include eth0`, and the hosts have no eth0.
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "btl_tcp_if_include"] == ["vb0"]
    assert "oob_tcp_if_include" not in argv  # mpirun's own namespace has no vb0


def test_openmpi_takes_any_slots_each_rank_its_own(cluster, out_dir):
    # mpirun shows a rank every GPU of its node: bench gives it a count per host and each rank takes its slot
    # from plan.json (bench.core.placement, gpu_by "slot"), so a failed GPU can be left out by its slot.
    hf = cluster.write_hostfile(2, name="hostfile-2")
    h = cluster.hosts
    proc = bench("--hostfile", str(hf), "--launcher", "openmpi", "--include", f"{h[0]}:1@{h[1]}:0,1", "--dry-run",
                 "--dataset", "synthetic", "--out", out_dir, env=cluster.env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    plan = one_json(proc.stdout)["plan"]
    assert plan["resources"] == {h[0]: [1], h[1]: [0, 1]} and plan["gpu_by"] == "slot", plan
    assert "--include" not in plan["command"]  # DeepSpeed's openmpi runner refuses it: the counts say it all
    assert not glob.glob(os.path.join(out_dir, "*", "ranks", "*"))


def test_host_without_sshd_is_named_and_nothing_starts(cluster, out_dir):
    down = cluster.hosts[1]
    cluster.stop_sshd(down)
    try:
        # The preflight deadline is 15 s; the subprocess timeout catches a hang.
        proc = bench("--hostfile", str(cluster.hostfile), "--launcher", "pdsh", "--dataset", "synthetic",
                     "--steps", "20", "--json", *FAST, "--out", out_dir, env=cluster.env, timeout=60)
    finally:
        cluster.start_sshd(down)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert down in proc.stderr
    assert not [h for h in cluster.hosts if h != down and f"preflight: {h}:" in proc.stderr]
    assert "Traceback" not in proc.stderr
    # Nothing launched: no rank wrote a PID file or a log anywhere under --out.
    assert not glob.glob(os.path.join(out_dir, "*", "ranks", "*"))
    assert not glob.glob(os.path.join(out_dir, "*", "logs", "rank*.log"))


def test_ctrl_c_stops_every_remote_rank_by_pid(cluster, out_dir):
    """pdsh's ssh sessions have no tty: killing them leaves remote ranks running, and
    DeepSpeed's own stop (`pkill -f` on every host) must not run. bench stops them by PID.
    --steps 5000 would run for many minutes: only a stop ends them in time."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "--hostfile", str(cluster.hostfile), "--launcher", "pdsh",
         "--dataset", "synthetic", "--steps", "5000", "--json", *FAST, "--out", out_dir],
        env=cluster.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped(proc):
        # Wait until every rank runs (its PID file is its first act).
        deadline = time.monotonic() + 300
        while len(glob.glob(os.path.join(out_dir, "*", "ranks", "pid-*"))) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.5)
        run_dir = os.path.dirname(os.path.dirname(glob.glob(os.path.join(out_dir, "*", "ranks", "pid-*"))[0]))
        pids = _rank_pids(run_dir)
        assert len(pids) == 3 and all(_still_running(p, run_dir) for p in pids)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert one_json(out)["status"] == "interrupted"
    assert not [p for p in pids if _still_running(p, run_dir)]


def test_out_that_is_not_shared_is_named_and_nothing_launches(cluster, out_dir):
    """One host sees its own (empty tmpfs) directory at --out's path: preflight names it for every command."""
    odd = cluster.hosts[1]
    os.makedirs(out_dir)
    cluster.stop_sshd(odd)
    cluster.start_sshd(odd, mount_over=out_dir)
    hostfile = ("--hostfile", str(cluster.hostfile))
    try:
        procs = {
            "run": bench(*hostfile, "--dataset", "synthetic", "--steps", "6", *FAST, "--out", out_dir,
                         env=cluster.env, timeout=300),
            "sweep": bench("sweep", "batch", "--micro-batches", "16", *hostfile, "--dataset", "synthetic", "--steps", "6",
                           *FAST, "--out", out_dir, env=cluster.env, timeout=300),
            "comm": bench("comm", *hostfile, "--sizes", "4K", "--out", out_dir, env=cluster.env, timeout=300),
        }
        # --no-keep-going: the host's row is what this test reads; judging the other two (the default) is
        # tests/multihost/test_validate_scale.py's.
        validate = bench("validate", *hostfile, "--level", "quick", "--json", "--no-keep-going", "--out", out_dir,
                         env=cluster.env, timeout=300)
    finally:
        cluster.stop_sshd(odd)
        cluster.start_sshd(odd)
    for name, proc in procs.items():
        # A sweep checks its own folder, for every host of the pool, before its first point.
        root = os.path.join(out_dir, "batch") if name == "sweep" else out_dir
        assert proc.returncode == 1, (name, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (name, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert lines == [f"bench: failed: preflight: {odd}: {root} is not the directory bench wrote "
                         "(not shared storage?)"], (name, proc.stderr)
    # validate says it in its preflight row for that host, and (--no-keep-going) stops there.
    assert validate.returncode == 1, validate.stderr[-2000:]
    rec = one_json(validate.stdout)
    rows = {c["node"]: c for c in rec["checks"] if c["check"] == "preflight"}
    assert rows[odd]["status"] == "FAIL" and "is not the directory bench wrote (not shared storage?)" in \
        rows[odd]["reason"], rows[odd]
    assert [h for h, c in rows.items() if c["status"] == "FAIL"] == [odd]
    # Nothing launched, nothing left: no run directory, the nonce file removed (a sweep keeps only its plan;
    # validate its own folder and record).
    validate_dirs = [d for d in os.listdir(out_dir) if d.startswith("validate-")]
    assert len(validate_dirs) == 1 and not os.path.exists(os.path.join(out_dir, validate_dirs[0], "runs"))
    assert sorted(set(os.listdir(out_dir)) - set(validate_dirs)) == ["batch"], os.listdir(out_dir)
    assert sorted(os.listdir(os.path.join(out_dir, "batch"))) == ["sweep.json"]
