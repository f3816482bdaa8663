"""bench validate's reach at 8 to 61 namespace hosts: preflight, the inventory, and launches of ranks that only
report, through pdsh, Open MPI and srun; then the 61-host cluster with four nodes broken, judged.

    .venv/bin/python benchmarks/validate_scale_hosts.py --hosts 8,16,32,61 --json reach.json   # as root; minutes
    VALIDATE_SCALE_KEEP=rec.json .venv/bin/python benchmarks/validate_scale_hosts.py --broken 61 --json broken.json
    .venv/bin/python benchmarks/validate_scale_hosts.py --ssh 30     # the head's CPU per ssh (validate_costs.json)

--hosts: for each host count, namespace hosts of one slot each (tests/multihost/netns.py) and:
  preflight   bench.cluster.preflight over ssh (every host at once: versions, the shared folder)
  inventory   bench probe on every host (bench.cluster.inventory.probe_any over ssh)
  pdsh        one launch through bench's pdsh command (bench's node launcher on every host) of a stand-in rank
  openmpi     the same through bench's mpirun command
  slurm       the same through srun, inside `salloc -N <hosts>` (a real Slurm: one slurmd per host)
The stand-in rank imports nothing of torch: it writes its RANK and host and exits, so each figure is the
launcher's fan-out, its node launchers and their teardown, not the ranks' imports (those are measured in
validate_levels.py). Each is timed from the call to its return, median of --rounds.

--broken N: N hosts of one slot, `bench validate --level quick --checks throughput`, with two hosts' sshd stopped,
one host whose Python exits as it imports bench's rank code, and one rank SIGSTOPped once it trains (the faults of
tests/multihost/test_validate_scale.py at 6 hosts): its time to verdict, each stage's, the verdicts, the load.

The hosts share this machine's two cores: what grows with the hosts here is ssh and Python start-up on two cores,
which a real cluster does on each node's own; the head's own share (its ssh clients) is what carries over.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO, load, machine, parse_smoke, save_json  # noqa: E402
from tests.multihost import netns  # noqa: E402

# mpirun and srun start the module themselves: their rank variables, not the node launcher's RANK.
STAND_IN = '''import json, os, socket, sys
run_dir = sys.argv[sys.argv.index("--run-dir") + 1]
e = os.environ
rank = e.get("RANK") or e.get("OMPI_COMM_WORLD_RANK") or e.get("SLURM_PROCID")
with open(os.path.join(run_dir, "ranks", "stand-in-%s.json" % rank), "w") as f:
    json.dump({"rank": rank, "host": socket.gethostname()}, f)
'''


def _launch(resources: dict[str, list[int]], launcher: str, environ: dict[str, str], root: str) -> float:
    """One launch of the stand-in rank on every host through `launcher`; seconds, and every rank must report."""
    from bench.launch.execute import execute
    from bench.launch.plan import build, plan_json, write_files

    run_dir = tempfile.mkdtemp(prefix=f"{launcher}-", dir=root)
    os.makedirs(os.path.join(run_dir, "ranks"))
    with open(os.path.join(run_dir, "stand_in.py"), "w") as f:
        f.write(STAND_IN)
    t0 = time.perf_counter()
    lp = build(resources, launcher, run_dir, "cpu", environ=environ, module="stand_in")
    with open(os.path.join(run_dir, "plan.json"), "w") as f:
        json.dump(plan_json(lp, resources, "cpu", 120.0), f)
    write_files(lp, resources, None)
    out = execute(lp, run_dir, timeout=120.0, expect_summary=False)
    took = time.perf_counter() - t0
    got = len([n for n in os.listdir(os.path.join(run_dir, "ranks")) if n.startswith("stand-in-")])
    if out.status != "ok" or got != len(resources):
        raise SystemExit(f"{launcher} at {len(resources)} hosts: {out.status}, {got} of {len(resources)} ranks "
                         f"reported: {out.error}")
    return took


def _srun_launch(slurm, n: int, root: str, rounds: int) -> list[float]:
    """The stand-in launch through bench's slurm launcher, inside an allocation of n nodes (timed there)."""
    code = ("import sys, json; sys.path.insert(0, %r); from benchmarks.validate_scale_hosts import _launch; "
            "from bench.cluster.slurm import allocation_slots; import os; "
            "res = {h: [0] for h in allocation_slots()}; "
            "print(json.dumps([_launch(res, 'slurm', dict(os.environ), %r) for _ in range(%d)]))") % (REPO, root, rounds)
    proc = slurm.run_in_allocation([sys.executable, "-c", code], nodes=n, timeout=900, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"slurm at {n} hosts: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _hosts(n: int, given: netns.Cluster | None):
    """n namespace hosts: `given` (the suite's, for its smoke run) or built for this measurement."""
    if given is None:
        return netns.build_cluster(n)
    if len(given.hosts) != n:
        raise SystemExit(f"validate_scale_hosts.py: {n} hosts asked, the cluster given has {len(given.hosts)}")
    return contextlib.nullcontext(given)


def reach(n: int, rounds: int, with_slurm: bool, cluster: netns.Cluster | None = None, slurm=None) -> dict:
    from bench.cluster.inventory import probe_any
    from bench.cluster.preflight import preflight

    row: dict = {"hosts": n, "load_before": load()}
    with _hosts(n, cluster) as c, tempfile.TemporaryDirectory(prefix="reach-", dir=str(c.tmp)) as root:
        resources = {h: [0] for h in c.hosts}
        saved = dict(os.environ)
        os.environ.update(c.env)
        try:
            times: dict[str, list[float]] = {"preflight": [], "inventory": [], "pdsh": [], "openmpi": []}
            for _ in range(rounds):
                t0 = time.perf_counter()
                checks = preflight(c.hosts, timeout=60.0, env=c.env, run_root=root)
                times["preflight"].append(time.perf_counter() - t0)
                bad = [x.message() for x in checks if not x.ok]
                if bad:
                    raise SystemExit(f"preflight at {n} hosts: {bad[:3]}")
                t0 = time.perf_counter()
                nodes, unreachable = probe_any("ssh", resources, 120.0)
                times["inventory"].append(time.perf_counter() - t0)
                if unreachable or len(nodes) != n:
                    raise SystemExit(f"inventory at {n} hosts: {unreachable}")
                env = dict(os.environ, GLOO_SOCKET_IFNAME=netns.NS_IFNAME)
                times["pdsh"].append(_launch(resources, "pdsh", env, root))
                times["openmpi"].append(_launch(resources, "openmpi", env, root))
            if with_slurm:
                from tests.multihost.slurm import build_slurm
                with contextlib.nullcontext(slurm) if slurm is not None else build_slurm(c) as s:
                    times["slurm"] = _srun_launch(s, n, root, rounds)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    row.update({k: round(statistics.median(v), 2) for k, v in times.items()})
    row["load_after"] = load()
    return row


def broken(n: int) -> dict:
    """`bench validate --checks throughput` over n hosts, four of them broken (test_validate_scale.py's faults)."""
    from tests.faults import exit_at_import, on_one_host, sigstop_on

    with netns.build_cluster(n) as c, contextlib.ExitStack() as stack:
        gone, bad, stopped_host = c.hosts[0:2], c.hosts[2], c.hosts[3]
        for h in gone:
            c.stop_sshd(h)
        site = stack.enter_context(on_one_host(c, bad, {"sitecustomize.py": exit_at_import("bench.worker")}))
        stopped = stack.enter_context(sigstop_on(c, stopped_host, after="start barrier"))
        out = tempfile.mkdtemp(prefix="broken-", dir=str(c.tmp))
        hostfile = c.write_hostfile(1)
        load_before, t0 = load(), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "bench", "validate", "--hostfile", str(hostfile), "--level",
                               "quick", "--checks", "throughput", "--out", out, "--json"], cwd=REPO,
                              env=dict(c.env, PYTHONPATH=site, PYTHONUNBUFFERED="1"), capture_output=True,
                              text=True, timeout=1800)
        took = time.perf_counter() - t0
        for h in gone:
            c.start_sshd(h)
    rec = json.loads(proc.stdout)
    keep = os.environ.get("VALIDATE_SCALE_KEEP")
    if keep:  # the whole record, for a person to read why each node got its verdict
        with open(keep, "w") as f:
            json.dump(rec, f)
    verdicts: dict[str, int] = {}
    for node in rec["nodes"].values():
        verdicts[node["verdict"]] = verdicts.get(node["verdict"], 0) + 1
    odd = {c["node"]: f"{c['status']}: {c['reason'][:160]}" for c in rec["checks"]
           if c["check"] == "throughput" and c["gpu"] is not None and c["status"] not in ("PASS", "SKIP")}
    return {"hosts": n, "exit": proc.returncode, "seconds": round(took, 1), "stopped": stopped, "not_pass": odd,
            "stages": {s["stage"]: round(s["duration_s"], 1) for s in rec["stages"]}, "verdicts": verdicts,
            "broken": {h: rec["nodes"][h]["verdict"] for h in (*gone, bad, stopped_host)},
            "load_before": load_before, "load_after": load()}


def ssh_cost(n: int, cluster: netns.Cluster | None = None) -> dict:
    """The head's share of reaching a node: CPU seconds of one ssh client (`ssh host true`, n in a row, after 3
    to warm up), from this process's children's rusage; the wall time per connection beside it."""
    import resource

    with _hosts(2, None) if cluster is None else contextlib.nullcontext(cluster) as c:
        argv = ["ssh", c.hosts[0], "true"]
        for _ in range(3):
            subprocess.run(argv, env=c.env, check=True)
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        for _ in range(n):
            subprocess.run(argv, env=c.env, check=True)
        r1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n
    return {"ssh_client_cpu_s": round(cpu, 4), "ssh_wall_s": round((t1 - t0) / n, 4), "connections": n,
            "load": load()}


def main(argv: list[str] | None = None, cluster: netns.Cluster | None = None, slurm=None) -> int:
    """cluster, slurm: hosts (and a Slurm over them) to use instead of building them (the suite's, for its smoke
    run); --hosts must then be its size, and --broken is refused (it stops hosts' sshd)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="", help="host counts for the reach measurements, e.g. 8,16,32,61")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-slurm", action="store_true", help="leave srun out")
    ap.add_argument("--broken", type=int, default=0, help="hosts for the broken-cluster validate (0: none)")
    ap.add_argument("--ssh", type=int, default=0, help="connections for the head's ssh cost (0: not measured)")
    ap.add_argument("--json", default=None)
    args = parse_smoke(ap, argv, dict(hosts="3", rounds=1, ssh=1),
                       what="no --broken run (it needs 4 hosts and trains on each; tests/multihost/"
                            "test_validate_scale.py runs its faults at 6)")
    if args.broken and cluster is not None:
        print("validate_scale_hosts.py: --broken builds its own hosts (it stops sshd on two)", file=sys.stderr)
        return 2
    print(machine(), flush=True)
    rows = []
    if args.ssh:
        rows.append(ssh_cost(args.ssh, cluster))
        print(json.dumps(rows[-1]), flush=True)
    for n in [int(x) for x in args.hosts.split(",") if x]:
        row = reach(n, args.rounds, not args.no_slurm, cluster, slurm)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.broken:
        row = broken(args.broken)
        rows.append(row)
        print(json.dumps(row), flush=True)
    save_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
