"""`bench validate` on real hosts (netns + sshd, see netns.py), 2 CPU ranks per host: every GPU and link judged.

Each fault is made from outside bench (tests/faults.py): a CPU quota on one
rank's process, tc on one host's veth, a sitecustomize that only one host
sees on its Python path. The healthy run is one session fixture
(conftest.healthy_validate) shared with the slowed-host test's baseline and
the prolog's reference curve. The hosts share this machine's two cores, so
every per-GPU figure jitters: a healthy cluster must still PASS every row.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from bench.core import results
from tests.conftest import REPO, one_json
from tests.faults import cpu_quota_on, on_one_host, perturb_linear

from .validate_runs import SLOTS, junit_matches, not_pass, said, prediction_holds, row, run_validate, skip_if_load_hid

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

PER_GPU = ("throughput", "numerics", "matmul", "copies", "memory")
STAGES = ("preflight", "inventory", "health", "dcgm", "throughput", "numerics", "copies", "memory", "burn",
          "intra-node", "inter-node", "rails", "training", "stragglers", "scaling")


def _gpus(cluster) -> list[str]:
    return [f"{h}:{s}" for h in cluster.hosts for s in range(SLOTS)]


def _tbf(cluster, host: str, rate: str) -> None:
    r = cluster.exec_in(host, ["tc", "qdisc", "add", "dev", "vb0", "root", "tbf", "rate", rate, "burst", "64kbit",
                               "latency", "50ms"])
    assert r.returncode == 0, r.stderr


@contextlib.contextmanager
def _throttled(cluster, host: str, rate: str):
    _tbf(cluster, host, rate)
    try:
        yield
    finally:
        cluster.exec_in(host, ["tc", "qdisc", "del", "dev", "vb0", "root"])


def test_the_false_alarm_benchmark_tallies_the_healthy_run(healthy_validate):
    """benchmarks/healthy_validates.py's smoke run at its smallest size: the tally of the one healthy record here
    (its --runs N builds hosts of its own: 20 in benchmarks/README.md)."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "healthy_validates.py"), "--records",
                           str(healthy_validate.out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "1 run(s), 0 with a row not PASS/SKIP; by check: none" in proc.stdout, proc.stdout
    assert re.search(r"closest to its line: throughput \S+ [+-]\d+% from its peers' median, (WARN|FAIL) below "
                     r"-\d+%: \d+ points of headroom", proc.stdout), proc.stdout


def test_healthy_cluster_passes_every_gpu_and_link_and_drains_nothing(healthy_validate, cluster):
    v = healthy_validate
    assert v.proc.returncode == 0, v.proc.stderr[-3000:] + v.proc.stdout[-3000:]
    rec = v.rec
    results.validate(rec)
    # CPU ranks' copies are shown, not judged (SKIP: asserted below).
    assert rec["result"] == "PASS", said(not_pass(rec, "burn", "rails", "copies", "memory"))
    assert not_pass(rec, "burn", "rails", "copies", "memory") == [], \
        "a healthy cluster: every row PASS (a WARN would be a false alarm)"
    assert {c["status"] for c in rec["checks"] if c["check"] == "burn"} == {"SKIP"}   # off at quick
    # One interface each and no HCA: nothing for the rails check (test_validate_rails has two).
    assert "no rails given" in row(rec, "rails", "cluster")["reason"]
    assert rec["drain"] == [] and rec["exclude"] == "" and (v.tmp / "drain.txt").read_text() == ""
    # No topology here (no --topology, no Slurm, no ibnetdiscover): the record and the terminal say what that costs.
    assert rec["topology"]["source"] is None and rec["topology"]["uplinks_covered"] is False, rec["topology"]
    assert "uplinks not covered" in v.proc.stderr, v.proc.stderr[-3000:]
    # Every GPU has its own rows; every node its link inside; every ring pair its link, each node its verdict.
    for check in PER_GPU:
        assert {c["node"] for c in rec["checks"] if c["check"] == check and c["gpu"] is not None} == \
            set(_gpus(cluster)), check
    h = cluster.hosts
    assert {c["node"] for c in rec["checks"] if c["check"] == "intra-node"} == set(h)
    # What --out is on each host, as that host's kernel mounted it (the namespace hosts share this disk).
    assert all("--out on " in row(rec, "preflight", x)["value"] for x in h)
    assert set(rec["measured"]["shared_dir"]) == set(h)
    assert {c["node"] for c in rec["checks"] if c["check"] == "inter-node"} == {
        f"{h[0]}+{h[1]}", f"{h[1]}+{h[2]}", f"{h[2]}+{h[0]}", *h, "cluster"}
    pairs = [c for c in rec["checks"] if c["check"] == "inter-node" and "+" in c["node"]]
    assert all(c["reference"].startswith("median") for c in pairs), "3 nodes: pairs judged against the nodes"
    # Time to verdict: every stage timed; one launch each (all nodes at once), none for the pure ones. The
    # numerics job runs first in the per-GPU launch (one start-up for both): its stage launches nothing.
    assert [s["stage"] for s in rec["stages"]] == list(STAGES)
    launches = {s["stage"]: s["launches"] for s in rec["stages"]}
    assert launches["numerics"] == 0 and launches["training"] == 1
    # The copies ride the per-GPU launch too: a host copy and a memcpy per CPU rank, judged by its peers alone.
    assert launches["copies"] == launches["memory"] == launches["burn"] == launches["rails"] == 0
    for gpu in _gpus(cluster):
        c, m = row(rec, "copies", gpu), row(rec, "memory", gpu)
        assert c["value"].startswith("host copy ") and "GB/s alone; all at once" in c["value"], c
        assert "peers only" in c["reason"] and "(no GPU)" in c["reason"] and m["value"].startswith("D2D "), (c, m)
        assert c["status"] == m["status"] == "SKIP" and "shown, not judged on CPU ranks" in c["reason"], (c, m)
        assert c["figure"] > 0 and m["figure"] > 0
    # A second round of GPUs where one looked like a straggler, a second look at links where one did not PASS
    # (three nodes' all-reduces time-slicing two cores: one came in at half its peers' busbw in a CI run). Both
    # link checks are measured in the intra-node check's one launch; inter-node launches only its second look.
    assert launches["throughput"] in (1, 2) and launches["intra-node"] in (1, 2) and launches["inter-node"] in (0, 1)
    assert launches["stragglers"] == launches["scaling"] == launches["health"] == 0
    # Each node's health, read by its probe's own process: the kernel log read, no GPU to read on these hosts.
    for host in h:
        hr = row(rec, "health", host)
        assert hr["status"] == "PASS" and "kernel-log" in hr["value"] and "no GPU on this node" in hr["reason"], hr
    assert {n["verdict"] for n in rec["nodes"].values()} == {"healthy"} and rec["exit_status"] == 0
    assert all(s["duration_s"] > 0 for s in rec["stages"])
    # Numerics: all six ranks bit for bit alike; the curve they agreed on saved for other nodes (the prolog).
    assert {x["params_sha256"] for x in rec["measured"]["numerics"].values()} == {
        next(iter(rec["measured"]["numerics"].values()))["params_sha256"]}
    saved = json.loads((v.tmp / "numerics.json").read_text())
    assert len(saved["curves"]) == 1 and saved["curves"][0]["losses"] == \
        next(iter(rec["measured"]["numerics"].values()))["losses"]
    # The metrics file: one 0/1 gauge per check that ran, every GPU's figure.
    from tests.metrics_check import parse, values
    got = parse((v.tmp / "validate.prom").read_text())
    ran = [c for c in rec["checks"] if c["status"] != "SKIP"]
    assert values(got, "vitbench_validate_check", status="PASS") == [1.0] * len(ran)
    for gpu in _gpus(cluster):
        host, slot = gpu.rsplit(":", 1)
        assert values(got, "vitbench_gpu_images_per_second", host=host, slot=slot) == \
            [rec["measured"]["gpu_images_per_s"][gpu]]
    assert values(got, "vitbench_validate_drain") == []
    assert values(got, "vitbench_node_verdict") == [0.0] * 3  # healthy
    prediction_holds(rec)
    assert rec["measured"]["dp"]["world_size"] == 3 * SLOTS
    for run_dir in rec["runs"].values():
        assert results.read(f"{run_dir}/results.jsonl").records[-1]["status"] == "ok"
    junit_matches(v.junit, rec)
    _by_the_profile(v, cluster)


def _by_the_profile(v, cluster) -> None:
    """The healthy run's command line was `bench validate --config site.toml` alone (conftest.healthy_validate):
    the hosts, launcher, container and master address came from the profile, and the record says so; every
    launch's ranks started through the container's stand-in, each world meeting at its own first host (the
    profile's master address where that is the first node: SiteLaunch.master_addr_of)."""
    import base64

    rec, h = v.rec, cluster.hosts
    assert rec["sources"] == dict.fromkeys(("hostfile", "out", "launcher", "container_exec", "master_addr", "level",
                                            "junit", "json", "metrics_file", "drain_file", "save_numerics_reference"),
                                           str(v.profile)), rec["sources"]
    assert rec["launcher"] == "pdsh" and rec["hosts"] == h
    lines = v.fake.calls.read_text().splitlines()
    starts = [line for line in lines if "-m bench.launch.node " in line]
    assert {line.split()[0] for line in starts} == set(cluster.hostnames), lines
    met = []
    for line in starts:
        args = dict(a[2:].split("=", 1) for a in line.split() if a.startswith(("--world-info=", "--master-addr=")))
        if "world-info" in args:
            met.append((list(json.loads(base64.urlsafe_b64decode(args["world-info"]))), args["master-addr"]))
    assert met and all(master == world[0] for world, master in met), met
    assert any(world[0] == h[0] and len(world) == 3 for world, _ in met), met   # the all-node launches: at h[0]
    # The nodes' own commands went through it too: the preflight's and the inventory's, on every host.
    for what in (f"{v.fake.image} python -c", "-m bench probe --local --json"):
        assert sorted(line.split()[0] for line in lines if what in line) == cluster.hostnames, (what, lines)


def test_one_slow_gpu_is_named_drained_and_regressed_alone(cluster, slow_gpu_validate):
    """Local rank 1 of one host at 8% of a core from its first timed step (a cgroup quota on that rank's
    process; its five peers share the rest of two cores, ~38% each, so it falls by ~79% against them, and by
    ~76% against the healthy run's third of a core): that GPU FAILs and is drained alone, it is the straggler
    named with its exclude, it regressed against the healthy run; no row says anything of another GPU or node.
    (A GPU at ~40% of its peers, which the old fixed lines only warned about: test_validate_slurm.) The run is
    conftest.slow_gpu_validate, whose report.html tests/multihost/test_report_html.py opens in a browser."""
    v, moved = slow_gpu_validate
    slow = cluster.hosts[1]
    gpu = f"{slow}:1"
    assert moved, "the quota caught no rank"
    rec = v.rec
    results.validate(rec)
    top = rec["measured"]["stragglers"][0]
    assert (top["kind"], top["host"], top["slot"]) == ("gpu", slow, 1), rec["measured"]["stragglers"]
    skip_if_load_hid(rec, gpu)  # the straggler above is still named
    assert v.proc.returncode == 1, v.proc.stderr[-3000:]
    r = row(rec, "throughput", gpu)
    assert r["status"] == "FAIL", r
    assert [(e["host"], e["gpu"], e["check"]) for e in rec["drain"]] == [(slow, 1, "throughput"), (slow, 1, "baseline")], \
        said([c for c in rec["checks"] if c["check"] in ("baseline", "throughput")])
    assert rec["exclude"] == gpu
    st = row(rec, "stragglers", "cluster")
    assert st["status"] == "WARN" and f"--exclude {gpu}" in st["reason"] and gpu in st["value"], st
    base = row(rec, "baseline", gpu)
    assert base["status"] == "FAIL" and base["reason"].startswith("regressed: images_per_s"), base
    # Every other row that is not PASS is about this GPU (its node's summary, the straggler row naming it) or a
    # check not asked for (SKIP).
    others = [c for c in not_pass(rec, *(c for c in STAGES if c not in ("throughput", "stragglers")))
              if c["node"] not in (gpu, slow) and not (c["check"] == "stragglers" and gpu in c["value"])]
    assert others == [], others
    assert f"{gpu} FAIL" in row(rec, "throughput", slow)["reason"]


def test_one_slow_link_is_named_by_bisection_and_the_pairs_without_it_pass(cluster, tmp_path):
    h = cluster.hosts
    slow = h[1]
    # 100 Mbit/s against the veth bridge's ~18 Gbit/s: slow enough that no contention can hide it.
    with _throttled(cluster, slow, "100mbit"):
        v = run_validate(cluster, tmp_path, "--checks", "inter-node", slots=1)  # a link's test: one rank a host
    assert v.proc.returncode == 1, v.proc.stderr[-3000:]
    rec = v.rec
    results.validate(rec)
    assert row(rec, "inter-node", f"{h[2]}+{h[0]}")["status"] == "PASS"
    for pair in (f"{h[0]}+{h[1]}", f"{h[1]}+{h[2]}"):
        assert row(rec, "inter-node", pair)["status"] == "FAIL"
    node = row(rec, "inter-node", slow)
    assert node["status"] == "FAIL" and "measured again against 2 node(s) found good" in node["reason"], node
    assert {b["against"] for b in rec["measured"]["bisection"][slow]} == {h[0], h[2]}
    for other in (h[0], h[2]):
        assert row(rec, "inter-node", other)["status"] == "PASS"
    assert [(e["host"], e["gpu"], e["check"]) for e in rec["drain"]] == [(slow, None, "inter-node")]
    assert rec["exclude"] == slow
    assert rec["measured"]["inter_all"]["ranks"] == 3  # the whole set measured once, with the slow node


def test_two_hosts_whose_link_is_below_the_floor_fail(cluster, tmp_path):
    """One link only: judged against the floor (no reference for a veth), never an unconditional PASS."""
    a, b = cluster.hosts[:2]
    with _throttled(cluster, b, "80mbit"):   # ~8 MB/s of busbw (50mbit gave 5): below the table's floor of 12.5 MB/s
        v = run_validate(cluster, tmp_path, "--include", f"{a}@{b}", "--checks", "inter-node", slots=1)
    assert v.proc.returncode == 1, v.proc.stderr[-3000:]
    rec = v.rec
    pair = row(rec, "inter-node", f"{a}+{b}")
    assert pair["status"] == "FAIL" and "below the floor" in pair["reason"], pair
    for host in (a, b):
        assert row(rec, "inter-node", host)["status"] == "FAIL"
        assert "which end is at fault cannot be told" in row(rec, "inter-node", host)["reason"]


@pytest.fixture(scope="module")
def perturbed(cluster):
    """The last host's ranks compute every linear layer off by one part in a million (its own sitecustomize)."""
    bad = cluster.hosts[2]
    with on_one_host(cluster, bad, {"sitecustomize.py": perturb_linear(1e-6)}) as site:
        yield bad, site


def test_a_gpu_that_computes_wrong_fails_numerics_and_slurm_drains_its_node(cluster, slurm, perturbed, tmp_path):
    bad, site = perturbed
    env = dict(slurm.env, PYTHONPATH=site)
    node = cluster.hostnames[cluster.hosts.index(bad)]
    try:
        v = run_validate(cluster, tmp_path, "--checks", "numerics", "--drain", "--drain-file",
                         str(tmp_path / "drain.txt"), env=env)
        shown = slurm.run(["scontrol", "show", "node", node], timeout=15).stdout
    finally:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=15)
    assert v.proc.returncode == 1, v.proc.stderr[-3000:]
    rec = v.rec
    results.validate(rec)
    for gpu in _gpus(cluster):
        r = row(rec, "numerics", gpu)
        if gpu.startswith(bad + ":"):
            assert r["status"] == "FAIL" and "from step" in r["reason"], r
            # Compared with the shipped reference curve where this platform has one, and with its peers.
            assert all(g in r["reason"] for g in _gpus(cluster)[:4]), ("names the GPUs it was compared with", r)
        else:
            assert r["status"] == "PASS", r
    assert [(e["host"], e["gpu"]) for e in rec["drain"]] == [(bad, 0), (bad, 1)]
    assert (tmp_path / "drain.txt").read_text() == f"{bad}\n"
    (done,) = rec["drained"]
    assert done["node"] == node and done["drained"], done
    assert "DRAIN" in shown and "Reason=bench validate: numerics (GPU 0): differs from" in shown, shown
    assert "from step" in shown.split("Reason=")[1], shown


def _prolog(cluster, host: str, tmp_path, *extra: str, site: str | None = None):
    """bench validate --level prolog run on `host` itself, over ssh, as a health check would run there."""
    path = f"PYTHONPATH={site} " if site else ""
    cmd = (f"cd {REPO} && {path}{sys.executable} -m bench validate --level prolog --out {tmp_path / host} "
           + " ".join(extra))
    return subprocess.run(["ssh", host, cmd], env=cluster.env, capture_output=True, text=True, timeout=300)


def test_prolog_drains_the_node_that_computes_wrong_and_passes_a_healthy_one(cluster, perturbed, healthy_validate,
                                                                             tmp_path):
    bad, site = perturbed
    ref = str(healthy_validate.tmp / "numerics.json")   # the curve six healthy ranks agreed on
    proc = _prolog(cluster, bad, tmp_path, "--numerics-reference", ref, site=site)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    (line,) = proc.stdout.splitlines()
    assert line.startswith("bench validate prolog: FAIL: numerics localhost:") and "reference curve" in line, line
    # A healthy node against the curve bench ships (bench/data/numerics_reference.json) where it has this
    # platform's: the shipped curve is checked here too; elsewhere its two ranks agree with each other.
    good = cluster.hosts[0]
    proc_ok = _prolog(cluster, good, tmp_path, "--json", site=site)
    assert proc_ok.returncode == 0, proc_ok.stdout[-2000:] + proc_ok.stderr[-2000:]
    rec = one_json(proc_ok.stdout)
    assert rec["result"] == "PASS" and rec["level"] == "prolog" and rec["hosts"] == ["localhost"]
    from bench.validate.numerics import load_references
    from bench.analysis.numerics import find_reference
    judged = {x["judged_by"] for x in rec["measured"]["numerics"].values()}
    stack = next(iter(rec["measured"]["numerics"].values()))["stack"]
    shipped = find_reference(load_references(None)[0], stack, rec["measured"]["numerics_spec"])
    assert judged == ({"reference"} if shipped else {"peers"}), (judged, stack)
    # How long a prolog takes is measured in benchmarks/ (benchmarks/README.md), not asserted here.


def test_host_without_sshd_is_unknown_and_no_keep_going_stops_there(cluster, tmp_path):
    """A host not reached is not a host that failed: ERROR, unknown (exit 3), nothing to drain. With
    --no-keep-going the run stops there and names the way on; the others are unknown too: not checked. (By
    default the others are judged: tests/multihost/test_validate_scale.py.)"""
    gone = cluster.hosts[2]
    cluster.stop_sshd(gone)
    try:
        v = run_validate(cluster, tmp_path, "--no-keep-going")
    finally:
        cluster.start_sshd(gone)
    rec = v.rec
    assert v.proc.returncode == 3, v.proc.stderr[-3000:]
    results.validate(rec)
    assert rec["drain"] == [] and rec["failed_hosts"] == [] and rec["exclude"].split("@")[-1] == gone
    r = row(rec, "preflight", gone)
    assert r["status"] == "ERROR" and "unreachable" in r["reason"] and "refused" in r["reason"]
    for host in cluster.hosts[:2]:
        assert row(rec, "preflight", host)["status"] == "PASS"
    assert {h: n["verdict"] for h, n in rec["nodes"].items()} == dict.fromkeys(cluster.hosts, "unknown")
    # Nothing after the failed preflight ran, every node still has its rows, and the way on is named.
    assert f"--exclude {gone}" in v.proc.stderr
    assert {c["status"] for c in rec["checks"] if c["check"] != "preflight"} == {"SKIP"}
    junit_matches(v.junit, rec)


# A host whose ranks cannot start (its Python exits as it imports bench's rank code): test_validate_scale's broken
# host through pdsh, test_validate_slurm's node3 through srun and through mpirun (there with every per-GPU check,
# numerics too, run without it).


def test_level_health_on_a_node_reads_its_counters_in_one_launch_and_says_what_it_could_not_read(cluster):
    """--level health on a namespace host over ssh, as a HealthCheckProgram runs it there: no rank starts; the
    kernel log is read; the GPU counters are not there to read (no GPU), and the row says so."""
    host = cluster.hosts[0]
    proc = subprocess.run(["ssh", host, f"cd {REPO} && {sys.executable} -m bench validate --level health --json "
                           f"--out /tmp/vitbench-health-{os.getpid()}"], env=cluster.env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = one_json(proc.stdout)
    assert rec["level"] == "health" and [s["stage"] for s in rec["stages"]] == ["preflight", "inventory", "health"]
    assert all(s["launches"] == 0 for s in rec["stages"])
    r = row(rec, "health", "localhost")
    assert r["status"] == "PASS" and "kernel-log: dmesg" in r["value"], r
    assert "nothing to read: gpu: no GPU on this node" in r["reason"], r
    assert rec["nodes"]["localhost"]["verdict"] == "healthy"


def test_a_gpu_slow_in_one_repeat_only_warns_and_says_how_often(cluster, tmp_path):
    """--repeats 2 with one rank at 15% of a core in the first round only (its peers have ~90% each: it falls by
    ~80%): WARN, not FAIL, '1 of 2'. One slot a host (the rule is per GPU; three ranks a round keep it short)."""
    slow = cluster.hosts[1]
    out = tmp_path / "results"
    quota = cpu_quota_on(cluster, slow, local_rank=0, module="bench.worker", quota_us=15000, after="start barrier")
    moved = quota.__enter__()
    lifted = False
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "validate", "--hostfile", str(cluster.write_hostfile(1)), "--level",
         "quick", "--repeats", "2", "--checks", "throughput", "--out", str(out), "--json"],
        cwd=REPO, env=dict(cluster.env, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        # The first round's per-GPU run has recorded: lift the quota (and stop catching ranks) for the second.
        deadline = time.monotonic() + 300
        while not glob.glob(str(out / "validate-*" / "runs" / "*" / "results.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.1)
        assert moved, "the quota caught no rank"
        quota.__exit__(None, None, None)
        lifted = True
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if not lifted:
            quota.__exit__(None, None, None)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rec = one_json(stdout)
    results.validate(rec)
    # How load is told from the fault: the peers ran at the same time, under the same load. Where other work holds
    # every rank below the quota's 15% of a core (a CI run with a leftover run's ranks), the quota slows nothing
    # relative to them and the fault is not there to find: said as such, not as a wrong verdict.
    round1 = {k: xs[0] for k, xs in rec["measured"]["gpu_images_per_s_rounds"].items()}
    peers = sorted(x for k, x in round1.items() if k != f"{slow}:0")
    assert round1[f"{slow}:0"] < 0.5 * peers[0], f"the machine's load hid the fault (first round: {round1})"
    r = row(rec, "throughput", f"{slow}:0")
    assert r["status"] == "WARN", r
    assert any(f"not PASS in 1 of 2 rounds ({first}, PASS)" in r["reason"] for first in ("FAIL", "WARN")), r
    for host in (cluster.hosts[0], cluster.hosts[2]):
        assert row(rec, "throughput", f"{host}:0")["status"] == "PASS", row(rec, "throughput", f"{host}:0")
    assert rec["measured"]["gpu_rounds"] == 2 and len(rec["measured"]["gpu_images_per_s_rounds"][f"{slow}:0"]) == 2


def test_a_node_hot_at_once_on_cpu_judges_throughput_over_time_and_says_there_is_no_nvml(cluster, tmp_path):
    """--burn 10s with only the checks that ride the per-GPU launch (one short launch): every rank of every host
    trains at once for 10 s after its steps; a row per host:slot judged on its throughput over time (the first
    and last 3.3 s, against the node's other rank), "no NVML here" said, the series in the record, a plot per
    node. The verdicts are not asserted PASS: two cores shared by six ranks and the machine's other work move
    every rank's rate together, which the judging calls the node's (WARN), never one rank's (FAIL)."""
    v = run_validate(cluster, tmp_path, "--checks", "copies,memory,burn", "--burn", "10s", timeout=600)
    assert v.proc.returncode in (0, 1), v.proc.stderr[-3000:]
    rec = v.rec
    results.validate(rec)
    assert [s["stage"] for s in rec["stages"] if s["launches"]] == ["copies"]   # one launch carries all three
    for gpu in _gpus(cluster):
        b = row(rec, "burn", gpu)
        assert b["status"] in ("PASS", "WARN"), b
        assert "no NVML here" in b["reason"] and "throughput over time only" in b["reason"], b
        assert " img/s over 10 s" in b["value"] and "first 3.33 s" in b["reason"], b
        assert row(rec, "copies", gpu)["status"] == "SKIP" and row(rec, "memory", gpu)["figure"] > 0
    for host in cluster.hosts:
        node = rec["measured"]["burn"][host]
        assert node["nvml"] is None and node["nvml_error"].startswith("no NVML here")
        assert all(8 <= len(g["intervals"]) <= 11 for g in node["gpus"].values()), node["gpus"]
        assert "no NVML here" in row(rec, "burn", host)["value"]
        assert os.path.getsize(os.path.join(rec["run_dir"], f"burn-{host}.png")) > 1000
