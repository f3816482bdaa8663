"""Where a result came from: versions, hosts, devices, git revision, allowed env.

The environment recorded is an allowlist (NCCL_*, GLOO_*, and a few named
variables), so no token, password or key ever lands in a result file.
"""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from typing import Any

from bench import __version__
from bench.core.accel_names import VISIBLE_ENVS

ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
ENV_NAMES = ("OMP_NUM_THREADS", *VISIBLE_ENVS, "DS_ACCELERATOR", "TP_SOCKET_IFNAME",
             "VITBENCH_IMAGE", "SLURM_JOB_ID", "SLURM_NNODES")
# Names that mark a secret. Forwarding to ranks (bench.launch.environment) drops these; the
# record is stricter and drops *KEY* names too (which would also drop a real
# NCCL_IB_PKEY from forwarding, so forwarding does not).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_RECORD_SECRET_WORDS = (*SECRET_WORDS, "KEY")


def release(version: str, parts: int = 3) -> tuple[int, ...] | None:
    """The first `parts` numbers of a version string ('2.14.1+cu130' -> (2, 14, 1)); None where one is not a number
    or there are fewer."""
    try:
        numbers = tuple(int(x) for x in version.split("+")[0].split(".")[:parts])
    except ValueError:
        return None
    return numbers if len(numbers) == parts else None


def allowed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in sorted(environ.items())
            if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not any(w in k for w in _RECORD_SECRET_WORDS)}


def git_revision() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def collect(plan: dict[str, Any], summary: dict[str, Any] | None) -> dict[str, Any]:
    ranks = sorted((summary or {}).get("ranks", []), key=lambda r: r["rank"])
    return {
        "bench_version": __version__,
        "git_revision": git_revision(),
        "launcher_host": os.uname().nodename,
        "hosts": sorted({r["host"] for r in ranks}) if ranks else list(plan["resources"]),
        "devices": [{"rank": r["rank"], "host": r["host"], "device": r["device"],
                     **({"gpu": r["gpu"]} if r.get("gpu") else {})} for r in ranks],
        # Each rank's own allowlisted environment, where it differs from the launching shell's.
        "rank_env": {str(r["rank"]): r["env"] for r in ranks if r.get("env") is not None and r["env"] != allowed_env()},
        # Versions the ranks ran with, else those of the launching node.
        "versions": (summary or {}).get("versions") or {
            n: _dist_version(n) for n in ("torch", "deepspeed", "timm")},
        "env": allowed_env(),
    }
