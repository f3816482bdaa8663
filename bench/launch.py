"""(resources, config, launcher) -> the argument list that starts the ranks.

Knows nothing of the model. Every launch goes through DeepSpeed's own runner
(`python -m deepspeed.launcher.runner`), which then uses pdsh, mpirun or
srun; bench adds what the runner lacks: exact resources (a resolved hostfile
plus an --include spec), an environment file that holds only KEY=VALUE lines
with values no remote shell can expand, and a free rendezvous port.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field

from bench import container
from bench.errors import BadInput

# Forwarded to every rank when set here (DeepSpeed forwards only PYTHON*, UCX*,
# MV2*, MLFLOW* and NCCL* by itself).
FORWARD_PREFIXES = ("NCCL_", "GLOO_", "TP_SOCKET_IFNAME", "CUDA_", "TORCH_NCCL_", "OMP_NUM_THREADS",
                    "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR", "DEEPSPEED_TIMEOUT")
# DeepSpeed's runner double-quotes values outside this set, which still lets a
# remote shell expand $(...): refuse them instead.
_SAFE_VALUE = re.compile(r"^[\w@%+=:,./-]*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]               # environment of the runner process
    env_file: dict[str, str] = field(default_factory=dict)  # written as .deepspeed_env
    hostfile: str | None = None
    launcher: str = "local"
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    entry_script: str | None = None    # written by write_files; runs `module` (slurm drops --module)
    module: str = "bench.worker"
    container: list[str] | None = None  # what enters the image on each node (bench.container), before its python

    def shell(self) -> str:
        """The exact command, copy-pasteable (for --dry-run and logs)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()) if k in _SHOWN_ENV)
        return (env + " " if env else "") + shlex.join(self.argv)


_SHOWN_ENV = ("DS_ENV_FILE", "OMP_NUM_THREADS", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR",
              "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "GLOO_SOCKET_IFNAME",
              "NCCL_SOCKET_IFNAME")


def _secret(name: str) -> bool:
    from bench.provenance import SECRET_WORDS

    return any(w in name for w in SECRET_WORDS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def include_spec(resources: dict[str, list[int]]) -> str:
    return "@".join(f"{h}:{','.join(map(str, slots))}" for h, slots in resources.items())


def hostfile_text(resources: dict[str, list[int]], slots_of: dict[str, int] | None = None) -> str:
    return "".join(f"{h} slots={(slots_of or {}).get(h, max(s) + 1)}\n" for h, s in resources.items())


def check_env_value(key: str, value: str, source: str) -> None:
    if not _ENV_KEY.match(key):
        raise BadInput(f"{source}: {key!r} is not an environment variable name")
    if not _SAFE_VALUE.match(value):
        raise BadInput(f"{source}: {key} has characters a remote shell would expand or split: {value!r}")


def rank_environment(device: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Variables every rank needs, plus the user's NCCL_*/GLOO_* settings."""
    environ = dict(os.environ if environ is None else environ)
    env: dict[str, str] = {
        # One thread per rank unless the user says otherwise: two ranks on two
        # cores with default threading oversubscribe and run at half speed.
        "OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "1"),
        "TORCH_EXTENSIONS_DIR": environ.get(
            "TORCH_EXTENSIONS_DIR", os.path.join(os.path.expanduser("~"), ".cache", "vitbench", "torch_extensions")),
        # The venv's bin first, so JIT builds on remote ranks find its ninja.
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), environ.get("PATH", "/usr/bin:/bin")]),
    }
    if device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    for k, v in environ.items():
        # DeepSpeed's launcher logs every forwarded NCCL_* value: a secret set
        # under such a name would land in the run's logs, so it stays here.
        if k.startswith(FORWARD_PREFIXES) and k not in env and not _secret(k):
            env[k] = v
    return env


def build(resources: dict[str, list[int]], launcher: str, run_dir: str, device: str,
          master_addr: str | None = None, master_port: int | None = None,
          environ: dict[str, str] | None = None, module: str = "bench.worker",
          container_exec: str | None = None) -> LaunchPlan:
    """The runner argv and environments for this run (nothing is started here).

    container_exec: RunConfig.container_exec; with a multi-node launcher,
    remote ranks start inside that image, or the one bench runs in
    (bench.container). One node needs no prefix: bench is already there.
    """
    environ = dict(os.environ if environ is None else environ)
    run_dir = os.path.abspath(run_dir)
    port = master_port or free_port()
    hosts = list(resources)
    addr = master_addr or ("127.0.0.1" if launcher == "local" else hosts[0])
    ce = None if launcher == "local" else container.resolve(container_exec, environ)
    rank_env = rank_environment(device, environ)
    if ce is not None and ce.in_container:
        # This PATH is the image's, not the nodes': exported there it could only
        # hide the host's apptainer. Inside, the image sets its own (Apptainer
        # never passes the host's PATH in).
        del rank_env["PATH"]
    for k, v in rank_env.items():
        check_env_value(k, v, "environment")

    argv = [sys.executable, "-u", "-m", "deepspeed.launcher.runner"]
    # The runner's own environment, which local ranks inherit: without the
    # secret-named variables DeepSpeed would log (see rank_environment).
    env = {k: v for k, v in environ.items() if not (k.startswith(FORWARD_PREFIXES) and _secret(k))}
    env.update(rank_env)
    plan = LaunchPlan(argv=argv, env=env, launcher=launcher, master_addr=addr, master_port=port)
    if launcher == "local":
        n = len(resources[hosts[0]])
        # An explicit, absent hostfile: never pick up a stray /job/hostfile.
        argv += ["--hostfile", os.path.join(run_dir, "no-hostfile"), "--num_gpus", str(n),
                 "--master_addr", addr, "--master_port", str(port)]
    else:
        plan.hostfile = os.path.join(run_dir, "hostfile")
        plan.env_file = rank_env
        env["DS_ENV_FILE"] = os.path.join(run_dir, ".deepspeed_env")
        argv += ["--hostfile", plan.hostfile, "--launcher", launcher, "--master_addr", addr,
                 "--master_port", str(port)]
        if len(resources) == 1:
            # DeepSpeed's runner (0.19.8) launches locally whenever one host is
            # selected, whatever --launcher says: one remote host would quietly
            # run on this machine instead.
            argv += ["--force_multi"]
        if launcher == "pdsh":
            argv += ["--include", include_spec(resources), "--no_ssh_check"]
            activate = os.path.join(os.path.dirname(sys.executable), "activate")
            if os.path.isfile(activate):
                argv += ["--venv_script", activate]
        elif launcher == "openmpi":
            _require_leading_slots(resources, launcher)
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            argv += ["--launcher_args", shlex.join(mpirun_args(environ))]
        elif launcher == "slurm":
            _require_leading_slots(resources, launcher)
            argv += ["--no_ssh_check", "--include", include_spec(resources)]
        else:
            raise BadInput(f"--launcher: unknown launcher {launcher!r}")
    plan.module = module
    if ce is not None:
        _enter_container(plan, ce, resources, run_dir, device)
    elif launcher == "slurm":
        # DeepSpeed's slurm runner (0.19.8) runs `python -u SCRIPT` and drops
        # --module, so the ranks get a script in the run dir (already on their
        # PYTHONPATH: the runner puts its cwd there) that runs the module.
        plan.entry_script = os.path.join(run_dir, "rank_entry.py")
        argv += [plan.entry_script, "--run-dir", run_dir]
    else:
        # module: the rank entrypoint (bench.worker trains; bench comm has its own).
        argv += ["--module", module, "--run-dir", run_dir]
    return plan


def _enter_container(plan: LaunchPlan, ce: container.ContainerExec, resources: dict[str, list[int]],
                     run_dir: str, device: str) -> None:
    """Start every rank through ce's prefix (the MPI hybrid model): `<prefix> python -u -m MODULE`."""
    plan.container = ce.prefix(os.path.dirname(run_dir))  # the results root: logs, figures, summary
    image_python = [*plan.container, ce.python]
    if plan.launcher == "openmpi":
        if ce.in_container:
            from bench.remote import is_local
            here = [h for h in resources if is_local(h)]
            if here:
                raise BadInput(f"--launcher openmpi: {here[0]} is this node, where mpirun would start ranks itself, "
                               f"inside this container, which has no {ce.argv[0]}; launch from a node outside the "
                               "hostfile, or use --launcher pdsh")
        # --no_python: DeepSpeed's OpenMPIRunner then runs the "script" (the
        # container binary) as is, `mpirun ... apptainer exec ... python -u -m
        # MODULE`; --module must go, or it would put `-m` before apptainer.
        plan.argv += ["--no_python", *image_python, "-u", "-m", plan.module, "--run-dir", run_dir]
    elif plan.launcher == "pdsh":
        plan.env["PDSH_RCMD_TYPE"] = "ssh"
        plan.argv = pdsh_container_argv(resources, run_dir, plan.master_addr, plan.master_port, image_python,
                                        plan.module, runner_exports(plan.env, plan.env_file, run_dir, device))
    else:
        counts = {h: len(s) for h, s in resources.items()}
        if len(set(counts.values())) > 1:
            raise BadInput(f"--launcher slurm: srun needs the same number of ranks on every host, got {counts}")
        plan.env["PYTHONPATH"] = os.pathsep.join(p for p in (run_dir, plan.env.get("PYTHONPATH")) if p)
        plan.argv = srun_container_argv(resources, run_dir, image_python, plan.module)


def runner_exports(env: dict[str, str], env_file: dict[str, str], run_dir: str, device: str) -> dict[str, str]:
    """What DeepSpeed's runner (0.19.8, runner.main) exports to remote ranks, in its order.

    PYTHON*, MLFLOW*, MV2*, UCX* (and NCCL* with the CUDA accelerator) from
    its environment, PYTHONPATH led by its working directory (the run dir),
    then every line of the env file.
    """
    env = dict(env, PYTHONPATH=os.pathsep.join(p for p in (run_dir, env.get("PYTHONPATH")) if p))
    prefixes = ("MLFLOW", "PYTHON", "MV2", "UCX") + (("NCCL",) if device == "cuda" else ())
    exports = {k: v.strip() for k, v in env.items() if k.startswith(prefixes)}
    exports.update(env_file)
    return exports


def pdsh_container_argv(resources: dict[str, list[int]], run_dir: str, master_addr: str, master_port: int,
                        image_python: list[str], module: str, exports: dict[str, str]) -> list[str]:
    """pdsh starting DeepSpeed's per-node launcher inside the image on every host.

    DeepSpeed's runner is bypassed here, not its launcher: PDSHRunner (0.19.8)
    always runs `<its own sys.executable> -u -m deepspeed.launcher.launch` on
    the hosts, a path that exists only inside the image, and its one hook,
    --venv_script, prepends `source SCRIPT;`, which cannot enter a container.
    This is PDSHRunner.get_cmd's command with image_python in place of that
    interpreter: fan-out 1024, the hosts in resource order, --world_info (the
    resources as base64 JSON, as encode_world_info makes it), --node_rank=%n
    (pdsh's index of the host), the rendezvous, the exports, `cd` to the run
    dir. Two differences: values are shell-quoted (DeepSpeed's double quotes
    let a remote shell expand $(...)), and no `pkill -f` stop command goes
    with it (bench stops ranks by PID).
    """
    world_info = base64.urlsafe_b64encode(json.dumps(resources).encode("utf-8")).decode("utf-8")
    node_launch = [*image_python, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world_info}",
                   "--node_rank=%n", f"--master_addr={master_addr}", f"--master_port={master_port}", "--module",
                   "--enable_each_rank_log=None", module, "--run-dir", run_dir]
    remote = ("".join(f"export {k}={shlex.quote(v)}; " for k, v in exports.items())
              + f"cd {shlex.quote(run_dir)}; " + shlex.join(node_launch))
    return ["pdsh", "-S", "-f", "1024", "-w", ",".join(resources), remote]


def srun_container_argv(resources: dict[str, list[int]], run_dir: str, image_python: list[str],
                        module: str) -> list[str]:
    """srun starting every rank inside the image.

    DeepSpeed's SlurmRunner (0.19.8) puts its own sys.executable before the
    script whatever --no_python says, so it cannot run a container binary.
    This is its command for an --include'd set (-n, --nodelist, --nodes),
    with `--export=ALL` alone: the env file's variables are in srun's own
    environment instead, where a comma in a value cannot split the list.
    """
    total = sum(len(s) for s in resources.values())
    return ["srun", "-n", str(total), "--nodelist", ",".join(resources), "--nodes", str(len(resources)),
            "--export=ALL", *image_python, "-u", "-m", module, "--run-dir", run_dir]


def entry_script_text(module: str) -> str:
    return ("# Written by bench: DeepSpeed's slurm runner cannot start a module.\n"
            f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


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


def plan_json(lp: LaunchPlan, resources: dict[str, list[int]], device: str, timeout: float) -> dict:
    """The run's plan.json: what the ranks read (rendezvous, collective timeout) and the record keeps.

    The collective timeout is the run's --timeout, at least 30 s; the ranks
    apply it to every process group and execute's watchdog waits past it.
    """
    return {"world_size": sum(len(s) for s in resources.values()), "nodes": len(resources),
            "resources": resources, "launcher": lp.launcher, "device": device, "master_addr": lp.master_addr,
            "master_port": lp.master_port, "collective_timeout_s": max(30, int(timeout)), "command": lp.argv,
            "container": lp.container}


def mpirun_args(environ: dict[str, str]) -> list[str]:
    # Without --bind-to none OpenMPI pins every rank of a node to core 0.
    args = ["--bind-to", "none", "--oversubscribe"]
    iface = environ.get("NCCL_SOCKET_IFNAME") or environ.get("GLOO_SOCKET_IFNAME")
    if iface:
        # DeepSpeed's runner otherwise adds `btl_tcp_if_include eth0`, which
        # kills any MPI traffic on nodes without an eth0. Not oob_tcp_if_include:
        # mpirun itself applies it on the launching node, which (a login node,
        # or here the root namespace) may lack the ranks' interface; orted finds
        # a working address by itself.
        args += ["--mca", "btl_tcp_if_include", iface]
    return args


def _require_leading_slots(resources: dict[str, list[int]], launcher: str) -> None:
    for host, slots in resources.items():
        if slots != list(range(len(slots))):
            raise BadInput(f"--launcher {launcher}: cannot select slots {slots} on {host}; "
                           "exclude whole hosts or keep the first N slots (use pdsh for slot selection)")


def write_files(plan: LaunchPlan, resources: dict[str, list[int]], slots_of: dict[str, int] | None) -> None:
    """The resolved hostfile and the .deepspeed_env (KEY=VALUE lines only)."""
    if plan.hostfile:
        with open(plan.hostfile, "w") as f:
            f.write(hostfile_text(resources, slots_of if plan.launcher == "pdsh" else
                                  {h: len(s) for h, s in resources.items()}))
    if plan.env_file:
        path = plan.env["DS_ENV_FILE"]
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in plan.env_file.items()))
    if plan.entry_script:
        with open(plan.entry_script, "w") as f:
            f.write(entry_script_text(plan.module))
