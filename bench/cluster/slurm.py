"""A Slurm allocation read as a hostfile: its nodes, and one slot per task Slurm planned on each (or per GPU).

    slurm_hosts()          # {"node1": 4, "node2": 4} inside `salloc -N 2 --ntasks-per-node=4`
    allocation_slots()     # {"node1": 8, ...} inside `salloc -N 4 --gpus-per-node 8`: one slot per GPU
    tasks_per_node("2(x3),1")   # [2, 2, 2, 1]
    in_allocation()        # inside a job one may launch steps in (not a prolog or epilog)
"""

from __future__ import annotations

import os
import re
import shutil

from bench.core.errors import BadInput
# The drain line and the reason prefix live in core: the page that shows the line to copy (bench.render.html) reads
# them too, and render may not import cluster.
from bench.core.scontrol import REASON_MAX, REASON_PREFIX, drain_argv  # noqa: F401 (REASON_MAX: callers and tests)


def tasks_per_node(spec: str) -> list[int]:
    """Slurm's SLURM_TASKS_PER_NODE ("2(x3),1") as one count per node ([2, 2, 2, 1])."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise BadInput(f"SLURM_TASKS_PER_NODE: cannot read {spec!r}")
        counts += [int(m[1])] * int(m[2] or 1)
    return counts


def slurm_hosts(environ: dict[str, str] | None = None) -> dict[str, int]:
    """The current allocation as a hostfile would say it: {node: slots}.

    One slot per task Slurm planned on each node (--ntasks-per-node, e.g. one
    per GPU); the node list is expanded by `scontrol show hostnames`, Slurm's
    own reader of its hostlist syntax. BadInput outside an allocation.
    """
    import subprocess

    environ = dict(os.environ if environ is None else environ)
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise BadInput("--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_NODELIST); "
                       "run bench under sbatch or salloc, or give --hostfile")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, env=environ)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"--launcher slurm: scontrol show hostnames {nodelist}: {e}") from None
    nodes = out.stdout.split()
    if out.returncode != 0 or not nodes:
        raise BadInput(f"--launcher slurm: scontrol show hostnames {nodelist}: {out.stderr.strip() or 'no hosts'}")
    if environ.get("SLURM_NTASKS_PER_NODE", "").isdigit():
        counts = [int(environ["SLURM_NTASKS_PER_NODE"])] * len(nodes)
    elif environ.get("SLURM_TASKS_PER_NODE"):
        counts = tasks_per_node(environ["SLURM_TASKS_PER_NODE"])
    else:
        counts = [1] * len(nodes)
    if len(counts) != len(nodes):
        raise BadInput(f"SLURM_TASKS_PER_NODE: {len(counts)} counts for {len(nodes)} nodes ({nodelist})")
    return dict(zip(nodes, counts))


def in_allocation(environ: dict[str, str] | None = None) -> bool:
    """Inside a Slurm job whose nodes bench may launch steps on: not a Prolog, Epilog or HealthCheckProgram,
    which run outside any step (SLURM_SCRIPT_CONTEXT says which, Slurm 21.08 on)."""
    env = os.environ if environ is None else environ
    return bool(env.get("SLURM_JOB_ID") and (env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"))
                and not env.get("SLURM_SCRIPT_CONTEXT"))


# Where Slurm's clients look for their configuration when SLURM_CONF does not say (Debian's and upstream's).
CONF_PATHS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf")


def no_slurm(environ: dict[str, str] | None = None) -> str | None:
    """Why scontrol cannot reach a Slurm here (not on PATH, or no slurm.conf for it to read), or None."""
    env = os.environ if environ is None else environ
    if shutil.which("scontrol", path=env.get("PATH")) is None:
        return "scontrol is not on PATH"
    conf = env.get("SLURM_CONF")
    if conf:
        return None if os.path.exists(conf) else f"SLURM_CONF={conf} does not exist"
    if not any(os.path.exists(p) for p in CONF_PATHS):
        return f"no slurm.conf here (SLURM_CONF unset; none of {', '.join(CONF_PATHS)})"
    return None


_GRES_LINE = re.compile(r"^\s*Nodes=(\S+)\s.*\bGRES=(\S*)", re.M)


def _count_idx(idx: str) -> int:
    """'0-1' -> 2, '0,2-4' -> 4: how many GPU indices an IDX list holds."""
    n = 0
    for part in idx.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def gpus_from_job(text: str, expand) -> dict[str, int]:
    """{node: GPUs the job holds there} from `scontrol show job -d` ("Nodes=node[1-3] ... GRES=gpu:2(IDX:0-1)");
    expand turns a Slurm hostlist into names. Nodes without a gpu GRES are left out."""
    out: dict[str, int] = {}
    for nodes, gres in _GRES_LINE.findall(text):
        count = 0
        for entry in re.findall(r"gpu(?::[^:(,]+)?:(\d+)\(IDX:([^)]*)\)", gres):
            count += _count_idx(entry[1]) if entry[1] and entry[1] != "N/A" else int(entry[0])
        if count:
            for node in expand(nodes):
                out[node] = out.get(node, 0) + count
    return out


def _hostnames(nodelist: str, environ: dict[str, str]) -> list[str]:
    import subprocess

    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30,
                         env=environ)
    return out.stdout.split() if out.returncode == 0 else []


def allocation_slots(environ: dict[str, str] | None = None) -> dict[str, int]:
    """The allocation as bench validate checks it: {node: slots}, one slot per GPU the job holds on each node
    (`scontrol show job -d`: the GRES line per node), else per task Slurm planned there (slurm_hosts: CPU
    nodes, `salloc --ntasks-per-node`). BadInput where a node's ranks would outnumber the CPUs the job holds
    there: srun would refuse the step, and ranks squeezed onto fewer cores measure the host, not the GPU."""
    import subprocess

    environ = dict(os.environ if environ is None else environ)
    tasks = slurm_hosts(environ)
    job = environ.get("SLURM_JOB_ID", "")
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-d", job], capture_output=True, text=True, timeout=30,
                               env=environ)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"--launcher slurm: scontrol show job -d {job}: {e}") from None
    gpus = gpus_from_job(shown.stdout, lambda nl: _hostnames(nl, environ)) if shown.returncode == 0 else {}
    if not gpus:
        return tasks
    slots = {node: gpus.get(node, 0) or n for node, n in tasks.items()}
    cpus = environ.get("SLURM_JOB_CPUS_PER_NODE", "")
    if cpus:
        have = dict(zip(tasks, tasks_per_node(cpus)))
        short = [f"{node} {have[node]} CPU(s) for {n} GPU(s)" for node, n in slots.items() if have.get(node, n) < n]
        if short:
            raise BadInput(f"SLURM_JOB_CPUS_PER_NODE: the job holds {short[0]}: one rank per GPU needs a CPU "
                           "each; allocate with --ntasks-per-node=<GPUs per node> (or --cpus-per-gpu, --exclusive)")
    return slots


def node_addr(node: str, environ: dict[str, str] | None = None) -> str:
    """The address Slurm reaches `node` by (its NodeAddr), for a rendezvous on it: where node names do not resolve,
    or resolve to another network, Slurm's own address for the node is the one its steps can reach. The name
    itself where scontrol does not say."""
    import subprocess

    env = dict(os.environ if environ is None else environ)
    try:
        out = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return node
    m = re.search(r"\bNodeAddr=(\S+)", out.stdout)
    return m[1] if out.returncode == 0 and m and m[1] != "(null)" else node


def job_start(environ: dict[str, str] | None = None) -> float:
    """When this Slurm job started (Unix seconds): SLURM_JOB_START_TIME where Slurm sets it, else the job's
    StartTime from scontrol (the controller's local time). BadInput outside a job."""
    import subprocess
    from datetime import datetime

    env = dict(os.environ if environ is None else environ)
    if env.get("SLURM_JOB_START_TIME", "").isdigit():
        return float(env["SLURM_JOB_START_TIME"])
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        raise BadInput("--since-job: not inside a Slurm job (no SLURM_JOB_ID): run it from a job's epilog or step")
    try:
        out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"--since-job: scontrol show job {job}: {e}") from None
    m = re.search(r"\bStartTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", out.stdout)
    if out.returncode != 0 or not m:
        raise BadInput(f"--since-job: scontrol show job {job} gave no StartTime "
                       f"({(out.stderr or out.stdout).strip()[:200] or 'no output'})")
    return datetime.fromisoformat(m[1]).timestamp()


def drain(node: str, reason: str, environ: dict[str, str] | None = None, timeout: float = 30.0) -> tuple[bool, str]:
    """Drain one node; (done, what scontrol said or why it could not run)."""
    import subprocess

    try:
        out = subprocess.run(drain_argv(node, reason), capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ if environ is None else environ))
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"scontrol: {e}"
    said = (out.stderr or out.stdout).strip()
    return out.returncode == 0, said or ("drained" if out.returncode == 0 else f"scontrol exited {out.returncode}")




def in_prolog(environ: dict[str, str] | None = None) -> bool:
    """A Slurm Prolog or Epilog runs this: its exit status drains the node, and scontrol from it waits on
    slurmctld inside the script's own time."""
    env = os.environ if environ is None else environ
    return env.get("SLURM_SCRIPT_CONTEXT", "").startswith(("prolog", "epilog"))


def parse_node(text: str) -> tuple[str, str]:
    """(State, Reason) of `scontrol show node NAME` ("IDLE+DRAIN", "bench validate: numerics ..."): the reason
    runs to the end of its line, spaces and all."""
    state = re.search(r"\bState=(\S+)", text)
    reason = re.search(r"\bReason=(.*?)(?:\s+\[[^]]*\])?\s*$", text, re.M)
    return (state[1] if state else ""), (reason[1].strip() if reason else "")


def _scontrol(argv: list[str], environ: dict[str, str] | None, timeout: float) -> tuple[bool, str]:
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ if environ is None else environ))
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"scontrol: {e}"
    return out.returncode == 0, (out.stdout if out.returncode == 0 else out.stderr or out.stdout).strip() or \
        f"scontrol exited {out.returncode}"


def drained_for(reason: str) -> str | None:
    """The check a reason bench wrote names ("bench validate: throughput (GPU 1): ..." -> "throughput")."""
    if not reason.startswith(REASON_PREFIX):
        return None
    m = re.match(r"\s*([\w-]+)", reason[len(REASON_PREFIX):])
    return m[1] if m else None


def resume(node: str, checked: list[str] | None = None, environ: dict[str, str] | None = None,
           timeout: float = 30.0) -> dict:
    """Return `node` to service if bench drained it (its reason starts with REASON_PREFIX) for a check in
    `checked` (None: any); what was done."""
    ok, shown = _scontrol(["scontrol", "show", "node", node], environ, timeout)
    if not ok:
        return {"node": node, "resumed": False, "why": f"could not read its state: {shown}"}
    state, reason = parse_node(shown)
    if "DRAIN" not in state:
        return {"node": node, "resumed": False, "state": state, "why": "not drained: nothing to resume"}
    if not reason.startswith(REASON_PREFIX):
        return {"node": node, "resumed": False, "state": state, "reason": reason,
                "why": "drained for another reason, not by bench: left drained"}
    check = drained_for(reason)
    if checked is not None and check not in checked:
        return {"node": node, "resumed": False, "state": state, "reason": reason,
                "why": f"drained for {check}, which this run did not check: left drained (run a level that does)"}
    ok, said = _scontrol(["scontrol", "update", f"NodeName={node}", "State=RESUME"], environ, timeout)
    return {"node": node, "resumed": ok, "state": state, "reason": reason,
            "why": "bench drained it and it is healthy now" if ok else f"scontrol update: {said}"}
