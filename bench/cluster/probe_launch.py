"""Probe every node through MPI (mpirun + mpi4py) or Slurm (srun) instead of ssh.

Some clusters allow no ssh to compute nodes but do run mpirun or srun; the
inventory should come the way the job itself will start. Both return the
same (nodes, unreachable) pair as bench.cluster.inventory.probe_hosts.

    bench probe --hostfile F --launcher openmpi     # one mpirun rank per host, each printing its own
    bench probe --hostfile F --launcher slurm       # inside an allocation: one srun task per slot

Every task answers for its own node and needs no other: one that exits
(a broken install on one node) ends none of the others, so that node alone
is unreachable. srun is told --kill-on-bad-exit=0 (said, so a site's
KillOnBadExit=1 does not apply); mpirun `orte_abort_on_non_zero_status 0`,
and its ranks make no MPI call: Open MPI 4.1.4 holds every rank in MPI_Init
for as long as one that exited before it is missing (tried: mpi4py's ranks
still waiting after 40 s). A rank that a signal ends keeps such an mpirun
waiting too; the probe's timeout ends it, and the answers that came are kept.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time

from bench.cluster.container import remote_python
from bench.cluster.mpirun import mpirun_args
from bench.cluster.remote import HostResult


def _run(argv: list[str], timeout: float, env: dict[str, str]) -> tuple[int | None, str, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        return None, out, err + f"\nno answer within {timeout:g} s"


def _why(rc: int | None, err: str) -> str:
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return (f"exited {rc}" if rc is not None else "timed out") + (f": {lines[-1]}" if lines else "")


def probe_via_mpi(resources: dict[str, list[int]], timeout: float, environ: dict[str, str] | None = None,
                  container_exec: str | None = None, health=None) -> tuple[list[dict], dict[str, str]]:
    """One rank per host (hostfile order), each printing its node's inventory (bench.cluster.probe_mpi)."""
    hosts = list(resources)
    argv = [*remote_python(container_exec, dict(os.environ if environ is None else environ)), "-m",
            "bench.cluster.probe_mpi", *(health.argv() if health is not None else [])]
    answers = mpirun_per_node(hosts, argv, timeout, environ)
    nodes, unreachable = [], {}
    for host in hosts:
        got = answers[host]
        try:
            inv = json.loads(got.stdout) if got.rc == 0 and got.stdout else None
        except ValueError:
            inv = None
        if isinstance(inv, dict):
            nodes.append({**inv, "host": host, "slots": resources[host]})
        else:
            unreachable[host] = got.error or f"mpirun rank on {host} printed no inventory"
    return nodes, unreachable


def probe_srun_argv(resources: dict[str, list[int]]) -> tuple[list[str], str | None]:
    """srun with one task per slot, laid out as the job's own tasks will be; the command to run follows.

    (argv, the SLURM_HOSTFILE text that uneven slots need, else None.) Each task gets the GPUs the
    allocation binds to one of the job's tasks (--gpus-per-task is inherited from it); asking a task for
    more is refused ("Step requested gres_per_task=gpu:2 is more than the job's"), so the probe takes the
    tasks' own view and bench.cluster.task_gpus merges them per node.
    """
    hosts = list(resources)
    counts = [len(resources[h]) for h in hosts]
    total = str(sum(counts))
    if len(set(counts)) == 1:
        return ["srun", "--label", "--nodes", str(len(hosts)), "--ntasks", total, "--ntasks-per-node",
                str(counts[0]), "--nodelist", ",".join(hosts), "--kill-on-bad-exit=0"], None
    # Uneven slots: srun places the tasks in the order of SLURM_HOSTFILE (one line per task).
    return ["srun", "--label", "--ntasks", total, "--distribution=arbitrary", "--kill-on-bad-exit=0"], "".join(
        f"{h}\n" * n for h, n in zip(hosts, counts))


def probe_via_srun(resources: dict[str, list[int]], timeout: float, environ: dict[str, str] | None = None,
                   container_exec: str | None = None, with_torch: bool = False,
                   health=None) -> tuple[list[dict], dict[str, str]]:
    """One srun task per slot of the allocation, each printing its own inventory; merged per node."""
    from bench.cluster.task_gpus import merge_tasks

    from bench.cluster.probe import TORCH_TASK_ENV

    env = dict(os.environ if environ is None else environ)
    env[TORCH_TASK_ENV] = "0"  # torch once per node, in the task the merged inventory is built on
    hosts = list(resources)
    # --label: srun prefixes every piece it forwards with "N: ". It also cuts
    # long lines into 1 KiB pieces (a newline after each), so each task's one
    # JSON line is put back together from its labelled pieces.
    srun, layout = probe_srun_argv(resources)
    argv = [*srun, *remote_python(container_exec, env), "-m", "bench", "probe", "--local", "--json",
            *(["--with-torch"] if with_torch else []), *(health.argv() if health is not None else [])]
    with tempfile.NamedTemporaryFile("w", prefix="bench-probe-", suffix=".tasks") as hf:
        if layout is not None:
            hf.write(layout)
            hf.flush()
            env["SLURM_HOSTFILE"] = hf.name
        rc, out, err = _run(argv, timeout, env)
    # Each task's answer stands on its own: a node whose task failed does not hide the others'.
    failed = f"srun: {_why(rc, err)}; " if rc != 0 else ""
    by_name: dict[str, list[dict]] = {}
    for text in _per_task(out).values():
        try:
            inv = json.loads(text)["nodes"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        by_name.setdefault(inv.get("hostname", ""), []).append(inv)
    nodes, unreachable = [], {}
    for host in hosts:
        tasks = by_name.get(host) or by_name.get(host.split(".")[0])
        if not tasks:
            unreachable[host] = f"{failed}srun task on {host} printed no inventory"
            continue
        if len(tasks) < len(resources[host]):
            unreachable[host] = (f"{failed}{len(tasks)} of the {len(resources[host])} srun tasks on {host} printed "
                                 "an inventory")
            continue
        nodes.append({**merge_tasks(tasks), "host": host, "slots": resources[host]})
    return nodes, unreachable


def srun_per_node(hosts: list[str], argv: list[str], timeout: float,
                  environ: dict[str, str] | None = None) -> dict[str, HostResult]:
    """Run argv once on every node through one srun step; each task prints one JSON line with its "hostname".

    The answers of bench.cluster.remote.run_on_hosts, for a cluster reached
    through srun instead of ssh (bench.cluster.preflight under Slurm).
    """
    env = dict(os.environ if environ is None else environ)
    t0 = time.monotonic()
    rc, out, err = _run(["srun", "--label", "--nodes", str(len(hosts)), "--ntasks", str(len(hosts)),
                         "--ntasks-per-node", "1", "--nodelist", ",".join(hosts), "--kill-on-bad-exit=0", *argv],
                        timeout, env)
    elapsed = time.monotonic() - t0
    by_name: dict[str, str] = {}
    for text in _per_task(out).values():
        try:
            by_name[str(json.loads(text)["hostname"])] = text
        except (ValueError, KeyError, TypeError):
            continue
    answers = {}
    for host in hosts:
        text = by_name.get(host) or by_name.get(host.split(".")[0])
        if text is not None:
            answers[host] = HostResult(host, 0, text, "", elapsed)
        else:
            answers[host] = HostResult(host, rc, "", err, elapsed, error=f"srun: {_why(rc, err)}" if rc != 0
                                       else f"srun task on {host} printed no answer")
    return answers


def mpirun_per_node(hosts: list[str], argv: list[str], timeout: float,
                    environ: dict[str, str] | None = None) -> dict[str, HostResult]:
    """srun_per_node through mpirun: one rank per host (slots=1 each, in order), each printing one JSON line.

    Inside a Slurm allocation mpirun starts its daemons through Slurm (no ssh); elsewhere through its rsh
    agent, ssh. --tag-output prefixes every line with the rank it came from ("[1,2]<stdout>:").
    """
    env = dict(os.environ if environ is None else environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    t0 = time.monotonic()
    with tempfile.NamedTemporaryFile("w", prefix="bench-preflight-", suffix=".hosts") as hf:
        hf.write("".join(f"{h} slots=1\n" for h in hosts))
        hf.flush()
        rc, out, err = _run(["mpirun", "-n", str(len(hosts)), "--hostfile", hf.name, "--tag-output",
                             *mpirun_args(env), "--mca", "orte_abort_on_non_zero_status", "0", *argv], timeout, env)
    elapsed = time.monotonic() - t0
    answers = {}
    by_rank = _by_tag(out)
    for rank, host in enumerate(hosts):
        text = by_rank.get(rank)
        if text:
            answers[host] = HostResult(host, 0, text, "", elapsed)
        else:
            answers[host] = HostResult(host, rc, "", err, elapsed, error=f"mpirun: {_why(rc, err)}" if rc != 0
                                       else f"mpirun rank on {host} printed no answer")
    return answers


_TAG = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:")


def _by_tag(out: str) -> dict[int, str]:
    """{rank: the first JSON object it printed}: mpirun's --tag-output prefixes each piece it forwards, and two
    ranks' pieces can meet on one line, so the text is cut at every tag, not at line starts."""
    pieces: dict[int, str] = {}
    marks = list(_TAG.finditer(out))
    for m, nxt in zip(marks, [*marks[1:], None]):
        if "<stdout>" in m[0]:
            text = out[m.end(): nxt.start() if nxt else len(out)]
            pieces[int(m[1])] = pieces.get(int(m[1]), "") + text.replace("\n", "")
    found = {}
    for rank, text in pieces.items():
        start = text.find("{")
        try:
            obj, end = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
        except ValueError:
            continue
        found[rank] = text[start:start + end]
    return found


def _per_task(out: str) -> dict[str, str]:
    tasks: dict[str, list[str]] = {}
    for line in out.splitlines():
        label, sep, text = line.partition(": ")
        if sep and label.strip().isdigit():
            tasks.setdefault(label.strip(), []).append(text)
    return {k: "".join(v) for k, v in tasks.items()}
