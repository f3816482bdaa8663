"""A stand-in for `apptainer`, first on PATH, for runs whose ranks start through --container-exec (or a site
profile's container-exec) on the namespace hosts.

Apptainer cannot be installed here (Debian 12 has no package, and nothing else is reachable), so `apptainer` is
a shell script that accepts only the argv bench builds (`exec [--nv] [-B DIR]... IMAGE CMD...`, the image a
file, each bound directory existing), appends `<hostname> <args>` to a call log, sets what Apptainer sets inside
(APPTAINER_CONTAINER, APPTAINER_NAME) plus VITBENCH_IN_FAKE_APPTAINER=1, puts the venv first on PATH as the
image's %environment does, and execs CMD on the host. It proves the plumbing only: which command runs on which
host, through which prefix, with which arguments. It proves nothing about Apptainer itself (mounting the image,
--nv, binds).

    fake = install(tmp_path, cluster.env)
    bench(..., "--container-exec", fake.exec_prefix, env=fake.env)
    fake.calls.read_text()                     # one line per command started through it
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

_FAKE = """#!/bin/sh
# Stand-in for apptainer (see tests/multihost/fake_apptainer.py): checks argv, runs CMD on the host.
set -eu
die() {{ echo "fake apptainer on $(hostname): $*" >&2; exit 64; }}
[ "${{1:-}}" = exec ] || die "expected 'exec', got '${{1:-}}'"
shift
nv=no
while [ $# -gt 0 ]; do
    case "$1" in
        --nv) nv=yes; shift ;;
        -B) [ $# -ge 2 ] && [ -d "$2" ] || die "-B needs an existing directory, got '${{2:-}}'"; shift 2 ;;
        -*) die "unexpected option '$1'" ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || die "expected IMAGE CMD..., got '$*'"
image=$1
shift
[ -f "$image" ] || die "no image $image"
echo "$(hostname) nv=$nv $image $*" >> {calls}
APPTAINER_CONTAINER=$image APPTAINER_NAME=$(basename "$image") VITBENCH_IN_FAKE_APPTAINER=1
export APPTAINER_CONTAINER APPTAINER_NAME VITBENCH_IN_FAKE_APPTAINER
# The image's %environment (apptainer/vit.def) puts its venv first.
PATH={venv_bin}:$PATH
export PATH
exec "$@"
"""


@dataclass(frozen=True)
class FakeApptainer:
    env: dict[str, str]   # the hosts' env with the stand-in first on PATH, outside any container
    image: str            # the stand-in image (a file)
    calls: Path           # its call log
    binary: str           # the stand-in by absolute path

    @property
    def exec_prefix(self) -> str:
        """--container-exec's value. By path: commands over ssh (preflight, probe, cleanup) get the remote login's
        PATH, which does not hold the stand-in's directory; on a cluster apptainer is in /usr/bin."""
        return f"{self.binary} exec {self.image}"


def install(folder: Path, env: dict[str, str]) -> FakeApptainer:
    bin_dir = folder / "fakebin"
    bin_dir.mkdir()
    calls = folder / "apptainer-calls.log"
    script = bin_dir / "apptainer"
    script.write_text(_FAKE.format(calls=calls, venv_bin=os.path.dirname(sys.executable)))
    script.chmod(0o755)
    image = folder / "vit.sif"
    image.write_bytes(b"stand-in image\n")
    env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    for var in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
        env.pop(var, None)  # bench runs outside any container: the prefix is --container-exec's
    binary = shutil.which("apptainer", path=env["PATH"])
    assert binary == str(script), binary
    return FakeApptainer(env, str(image), calls, binary)
