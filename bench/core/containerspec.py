"""`--container-exec` as text: parsed and checked, with no look at the machine.

    from bench.core.containerspec import parse, check_text
    parse("apptainer exec --nv --bind /data /shared/vit.sif")
    # ('apptainer', 'exec', '--nv', '-B', '/data', '/shared/vit.sif')

The value must be `apptainer|singularity exec [OPTIONS] IMAGE`, every word
safe to hand to a remote shell unquoted, and none that DeepSpeed's runner
would misread. Detection of the image bench runs in, and the prefix itself,
are bench.cluster.container's; RunConfig validates its field here.
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
# DeepSpeed 0.19.8's runner options. After the user script its parser still
# classifies every word, and a word that abbreviates two of these options is
# an error ("ambiguous option: --bind could match --bind_cores_to_rank,
# --bind_core_list"), so such a word cannot follow `--no_python apptainer`.
DS_RUNNER_OPTIONS = (
    "--hostfile", "--include", "--exclude", "--num_nodes", "--num_gpus", "--num_accelerators", "--master_port",
    "--master_addr", "--node_rank", "--launcher", "--launcher_args", "--module", "--no_python", "--no_local_rank",
    "--no_ssh", "--no_ssh_check", "--force_multi", "--save_pid", "--enable_each_rank_log", "--autotuning",
    "--bind_cores_to_rank", "--bind_core_list", "--ssh_port", "--venv_script", "--log_level", "--quiet", "--help",
)  # fmt: skip


def parse(text: str) -> tuple[str, ...]:
    """`--container-exec` as an argv, checked: `apptainer|singularity exec [OPTIONS] IMAGE`.

    `--bind X` / `--bind=X` become `-B X` (the same option; see DS_RUNNER_OPTIONS).
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
        elif _ambiguous_for_deepspeed(w):
            raise BadInput(f"{OPTION}: DeepSpeed's runner cannot pass {w!r} on (it abbreviates several of its "
                           "own options); use the option's short form")
        else:
            out.append(w)
    return tuple(out)


def _ambiguous_for_deepspeed(word: str) -> bool:
    if not word.startswith("--"):
        return False
    stem = word.split("=", 1)[0]
    return stem not in DS_RUNNER_OPTIONS and sum(o.startswith(stem) for o in DS_RUNNER_OPTIONS) > 1


def check_text(text: str | None) -> None:
    """Validate a RunConfig.container_exec value (None and "none" are fine)."""
    if text is not None and text != "none":
        parse(text)
