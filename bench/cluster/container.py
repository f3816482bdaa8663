"""Start remote ranks inside the container image bench itself runs in (Apptainer/Singularity).

    apptainer exec --nv /shared/vit.sif bench --hostfile hostfiles/tesla --launcher openmpi
    bench --hostfile hostfiles/tesla --container-exec "apptainer exec --nv /shared/vit.sif"

Inside `apptainer exec vit.sif bench ...` the interpreter bench runs
(/opt/venv/bin/python) exists only in the image. A remote rank started as
`<that python> -m ...` on another node's host fails, so every remote
command gets a prefix that enters the image there first: the MPI hybrid
model, `mpirun -n N apptainer exec --nv vit.sif python ...`.

Detection (no option given): Apptainer sets APPTAINER_CONTAINER (and, for
compatibility, SINGULARITY_CONTAINER) to the image inside the container;
SingularityCE sets only SINGULARITY_CONTAINER.

`--nv` (bind the host's driver and GPUs) is decided by what the nodes are,
never by the node bench runs on, which is often a GPU-less login node: the
probes and preflight always enter with --nv (on a node without a driver
Apptainer warns and goes on), so a GPU node is seen as one; the ranks get
--nv when the plan's device, taken from the nodes' inventory, is cuda
(bench.launch.plan.build; with_devices, the flags from the GPU backend's row of
bench/data/accelerators.json). A prefix the user wrote with --nv or --nvccli is
left as written.

`--container-exec "BIN exec [OPTIONS] IMAGE"` supplies or overrides the
prefix (e.g. a different image path on the nodes), `--container-exec none`
turns detection off. Docker is not a prefix: Docker nodes run the image's
sshd and bench reaches them over ssh (docs/images.md).

Nothing here imports torch; the prefix is an argument list.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from bench.core.accel_names import by_device, vendor
from bench.core.containerspec import OPTION, SAFE_WORD, parse
from bench.core.errors import BadInput

# Re-exported: callers of the container layer read the text rules here too.
__all__ = ["OPTION", "ContainerExec", "detect", "parse", "remote_python", "resolve",
           "running_in_container"]


@dataclass(frozen=True, slots=True)
class ContainerExec:
    """How a remote rank enters the image: `argv` (BIN exec [OPTIONS] IMAGE), then `python`."""

    argv: tuple[str, ...]
    python: str          # the interpreter inside the image
    source: str          # where the prefix came from: APPTAINER_CONTAINER, SINGULARITY_CONTAINER, --container-exec
    in_container: bool   # bench itself runs inside a container (its PATH and python are the image's)

    @property
    def image(self) -> str:
        return self.argv[-1]

    def with_devices(self, device: str = "cuda", accel: str | None = None) -> "ContainerExec":
        """The same prefix giving the container the host's `device`s (its backend's container_flags for this
        runtime, bench/data/accelerators.json: --nv for GPUs; accel names the backend, else the device type's
        first), unless it already does (container_binds)."""
        entry = vendor(accel) if accel else by_device(device)
        runtime = os.path.basename(self.argv[0])
        flags = entry["container_flags"].get(runtime, entry["container_flags"].get("apptainer", []))
        binds = entry.get("container_binds", {}).get(runtime, entry.get("container_binds", {}).get("apptainer", []))
        if not flags or any(a in binds for a in self.argv):
            return self
        return ContainerExec(argv=(self.argv[0], self.argv[1], *flags, *self.argv[2:]), python=self.python,
                             source=self.source, in_container=self.in_container)

    def with_nv(self) -> "ContainerExec":
        """with_devices("cuda"): the host's GPU driver bound."""
        return self.with_devices("cuda")

    def prefix(self, bind: str) -> list[str]:
        """argv with `-B bind` after `exec`: the ranks write their logs and figures under bind.

        `-B` is --bind's short form in Apptainer and Singularity alike.
        """
        return [self.argv[0], self.argv[1], "-B", bind, *self.argv[2:]]


def running_in_container(environ: dict[str, str] | None = None) -> str | None:
    """The image bench runs in (APPTAINER_CONTAINER / SINGULARITY_CONTAINER), or None."""
    env = os.environ if environ is None else environ
    return env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER") or None


def detect(environ: dict[str, str] | None = None) -> ContainerExec | None:
    """The prefix that runs the image bench is in on another node, or None outside a container."""
    env = os.environ if environ is None else environ
    for binary, var in (("apptainer", "APPTAINER_CONTAINER"), ("singularity", "SINGULARITY_CONTAINER")):
        image = env.get(var)
        if image:
            break
    else:
        return None
    if "://" not in image:  # a URI (docker://...) is fetched again on each node; a path is made absolute
        image = os.path.abspath(image)
    if not SAFE_WORD.match(image):
        raise BadInput(f"{var}: the image path {image!r} has characters a remote shell would split or expand; "
                       f"give {OPTION} \"{binary} exec IMAGE\" with a plain path")
    argv = (binary, "exec", image)
    return ContainerExec(argv=argv, python=sys.executable, source=var, in_container=True)


def resolve(text: str | None, environ: dict[str, str] | None = None) -> ContainerExec | None:
    """The prefix for remote ranks: --container-exec when given ("none": no prefix), else detected."""
    if text == "none":
        return None
    if text is None:
        return detect(environ)
    inside = running_in_container(environ) is not None
    # Inside the image bench's own interpreter is the image's; from a host
    # install, the image's `python` is whatever its PATH finds first (vit.def
    # and the Dockerfile put /opt/venv/bin there).
    return ContainerExec(argv=parse(text), python=sys.executable if inside else "python", source=OPTION,
                         in_container=inside)


def remote_python(container_exec: str | None = None, environ: dict[str, str] | None = None,
                  nv: bool = True, bind: str | None = None) -> list[str]:
    """The interpreter a command on another node starts: the image's through the prefix, else sys.executable.

    For bench's other remote commands (preflight, inventory, cleanup).
    bind: a directory to bind in as the ranks will have it (the preflight's
    check of the results root); the others need none, Apptainer binds the
    home and working directory by itself.
    """
    ce = resolve(container_exec, environ)
    if ce is None:
        return [sys.executable]
    if nv:
        ce = ce.with_devices("cuda")  # a GPU node must be seen as one by the probe (see the module docstring)
    return [*(ce.prefix(os.path.abspath(bind)) if bind else ce.argv), ce.python]
