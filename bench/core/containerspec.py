"""`--container-exec` as text: parsed and checked, with no look at the machine.

    from bench.core.containerspec import parse, check_text
    parse("apptainer exec --nv --bind /data /shared/vit.sif")
    # ('apptainer', 'exec', '--nv', '-B', '/data', '/shared/vit.sif')

The value must be `apptainer|singularity exec [OPTIONS] IMAGE`, every word
safe to hand to a remote shell unquoted. Detection of the image bench runs
in, and the prefix itself, are bench.cluster.container's; RunConfig
validates its field here.
"""

from __future__ import annotations

import os
import re
import shlex

from bench.core.errors import BadInput

OPTION = "--container-exec"
BINARIES = ("apptainer", "singularity")
# Words that reach pdsh's remote shell or mpirun unquoted must not be split or expanded.
SAFE_WORD = re.compile(r"^[\w@%+=:,./-]+$")


def parse(text: str) -> tuple[str, ...]:
    """`--container-exec` as an argv, checked: `apptainer|singularity exec [OPTIONS] IMAGE`.

    `--bind X` / `--bind=X` become `-B X` (the same option, in the form bench's own prefix uses).
    """
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise BadInput(f"{OPTION}: cannot split {text!r}: {e}") from None
    if not words:
        raise BadInput(f"{OPTION}: empty; give \"apptainer exec [OPTIONS] IMAGE\" or none")
    binary = os.path.basename(words[0])
    if binary in ("docker", "podman"):
        raise BadInput(f"{OPTION}: {binary} cannot start a rank per node here; run the image's sshd on every node "
                       "and launch from inside the image (docs/images.md, Multi-node with Docker)")
    if binary not in BINARIES:
        raise BadInput(f"{OPTION}: the first word must be apptainer or singularity (a path to one), got {words[0]!r}")
    if len(words) < 3 or words[1] != "exec":
        raise BadInput(f"{OPTION}: expected \"{words[0]} exec [OPTIONS] IMAGE\", got {text!r}")
    if words[-1].startswith("-"):
        raise BadInput(f"{OPTION}: the last word must be the image, got option {words[-1]!r}")
    out: list[str] = []
    for w in words:
        if not SAFE_WORD.match(w):
            raise BadInput(f"{OPTION}: {w!r} has characters a remote shell would split or expand")
        if w.startswith("--bind="):
            out += ["-B", w.split("=", 1)[1]]
        elif w == "--bind":
            out.append("-B")
        else:
            out.append(w)
    return tuple(out)


def check_text(text: str | None) -> None:
    """Validate a RunConfig.container_exec value (None and "none" are fine)."""
    if text is not None and text != "none":
        parse(text)
