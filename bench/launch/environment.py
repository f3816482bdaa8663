"""The environment of the ranks: what bench sets, what it forwards from this shell, and what it refuses.

    rank_environment("cpu", os.environ)   # OMP_NUM_THREADS, TORCH_EXTENSIONS_DIR, PATH, DS_ACCELERATOR, NCCL_*, ...

Remote ranks get these through .deepspeed_env (KEY=VALUE lines only, values
no remote shell can expand: check_env_value); local ranks inherit them.
"""

from __future__ import annotations

import os
import re
import sys

from bench.core.accel_names import VISIBLE_ENVS, by_device, vendor
from bench.core.errors import BadInput
from bench.core.provenance import SECRET_WORDS

# Forwarded to every rank when set here (DeepSpeed forwards only PYTHON*, UCX*,
# MV2*, MLFLOW* and NCCL* by itself). TORCH_FR_*: torch's flight recorder under its generic names (its buffer
# size, dump file), which torch 2.8+ reads before the TORCH_NCCL_* ones.
FORWARD_PREFIXES = ("NCCL_", "GLOO_", "TP_SOCKET_IFNAME", "CUDA_", "TORCH_NCCL_", "TORCH_FR_", "OMP_NUM_THREADS",
                    "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR", "DEEPSPEED_TIMEOUT")
NOT_FORWARDED = VISIBLE_ENVS   # every backend's visible-devices variable (bench/data/accelerators.json)
# DeepSpeed's runner double-quotes values outside this set, which still lets a
# remote shell expand $(...): refuse them instead.
# "^" is NCCL's exclusion syntax (NCCL_SOCKET_IFNAME=^lo,docker); no POSIX shell expands it.
_SAFE_VALUE = re.compile(r"^[\w@%+=:,./^-]*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_secret(name: str) -> bool:
    return any(w in name for w in SECRET_WORDS)


def check_env_value(key: str, value: str, source: str) -> None:
    if not _ENV_KEY.match(key):
        raise BadInput(f"{source}: {key!r} is not an environment variable name")
    if not _SAFE_VALUE.match(value):
        raise BadInput(f"{source}: {key} has characters a remote shell would expand or split: {value!r}")


def rank_environment(device: str, environ: dict[str, str] | None = None, accel: str | None = None) -> dict[str, str]:
    """Variables every rank needs, plus the user's NCCL_*/GLOO_* settings; accel: the nodes' backend (its device
    order variables; None: the first backend of the device type's)."""
    environ = dict(os.environ if environ is None else environ)
    env: dict[str, str] = {
        # One thread per rank on CPU unless the user says otherwise: two ranks on two cores with default
        # threading oversubscribe and run at half speed. GPU ranks get no default here: each rank sets its
        # node's cores / its ranks (bench.worker.bootstrap.set_threads), which ZeRO-Offload's CPU AdamW needs.
        **({"OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "1")} if device == "cpu" else {}),
        "TORCH_EXTENSIONS_DIR": environ.get(
            "TORCH_EXTENSIONS_DIR", os.path.join(os.path.expanduser("~"), ".cache", "vitbench", "torch_extensions")),
        # The venv's bin first, so JIT builds on remote ranks find its ninja.
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), environ.get("PATH", "/usr/bin:/bin")]),
    }
    if device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    else:
        # A GPU index means what the vendor's tools number (the runtime's default order, fastest first, can
        # differ on a node of mixed GPUs): the slots of a hostfile and the visible-devices variable are those
        # indices (the backend's device_order_env, bench/data/accelerators.json).
        for k, v in (vendor(accel) if accel else by_device(device))["device_order_env"].items():
            env[k] = environ.get(k, v)
    for k, v in environ.items():
        # DeepSpeed's launcher logs every forwarded NCCL_* value: a secret set
        # under such a name would land in the run's logs, so it stays here.
        # The visible-devices variable is this shell's choice of its own GPUs: each node's
        # launcher sets the ranks' from the slots (bench.launch.local for this one).
        if k.startswith(FORWARD_PREFIXES) and k not in env and not is_secret(k) and k not in NOT_FORWARDED:
            env[k] = v
    return env


def runner_exports(env: dict[str, str], env_file: dict[str, str], run_dir: str, device: str) -> dict[str, str]:
    """What DeepSpeed's runner (0.19.8, runner.main) exports to remote ranks, in its order, but secrets.

    PYTHON*, MLFLOW*, MV2*, UCX* (and NCCL* with the CUDA accelerator) from
    its environment, PYTHONPATH led by its working directory (the run dir),
    then every line of the env file. The exports are words of the pdsh or
    mpirun command, which plan.json records and `ps` shows every user: a
    variable whose name says it is a secret (MLFLOW_TRACKING_PASSWORD) is
    not among them, as rank_environment keeps such NCCL_* names here.
    """
    env = dict(env, PYTHONPATH=os.pathsep.join(p for p in (run_dir, env.get("PYTHONPATH")) if p))
    prefixes = ("MLFLOW", "PYTHON", "MV2", "UCX") + (("NCCL",) if device == "cuda" else ())
    exports = {k: v.strip() for k, v in env.items() if k.startswith(prefixes) and not is_secret(k)}
    exports.update(env_file)
    return exports
