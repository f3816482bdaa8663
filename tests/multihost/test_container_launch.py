"""`bench --container-exec` across real hosts (netns + sshd): every rank starts through the container binary.

    bench --hostfile F --launcher openmpi --container-exec "apptainer exec /tmp/x/vit.sif" ...
    bench --hostfile F --launcher pdsh    --container-exec "apptainer exec /tmp/x/vit.sif" ...

Apptainer cannot be installed here (Debian 12 has no package, and nothing
else is reachable), so `apptainer` is a STAND-IN: a shell script first on
PATH that accepts only the argv bench builds (`exec [--nv] [-B DIR]...
IMAGE CMD...`, the image a file, each bound directory existing), appends
`<hostname> <args>` to a call log, sets what Apptainer sets inside
(APPTAINER_CONTAINER, APPTAINER_NAME) plus VITBENCH_IN_FAKE_APPTAINER=1,
puts the venv first on PATH as the image's %environment does, and execs
CMD on the host. It proves the plumbing only: which command runs on which
host, through which prefix, with which arguments. It proves nothing about
Apptainer itself (mounting the image, --nv, binds).
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from bench.core import results
from tests.conftest import FAST, bench, one_json

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

_FAKE = """#!/bin/sh
# Stand-in for apptainer (see tests/multihost/test_container_launch.py): checks argv, runs CMD on the host.
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


@pytest.fixture
def fake_apptainer(cluster, tmp_path):
    """(env with the stand-in first on PATH, the image path, the call log)."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    calls = tmp_path / "apptainer-calls.log"
    script = bin_dir / "apptainer"
    script.write_text(_FAKE.format(calls=calls, venv_bin=os.path.dirname(sys.executable)))
    script.chmod(0o755)
    image = tmp_path / "vit.sif"
    image.write_bytes(b"stand-in image\n")
    env = dict(cluster.env, PATH=f"{bin_dir}{os.pathsep}{cluster.env['PATH']}")
    for var in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
        env.pop(var, None)  # bench runs outside any container: the prefix is --container-exec's
    return env, str(image), calls


@pytest.mark.parametrize("launcher", ["openmpi", "pdsh"])
def test_ranks_start_through_the_container_binary(cluster, out_dir, fake_apptainer, launcher):
    env, image, calls = fake_apptainer
    # By path: commands over ssh (preflight, probe, cleanup) get the remote login's PATH,
    # which does not hold the stand-in's directory; on a cluster apptainer is in /usr/bin.
    apptainer = shutil.which("apptainer", path=env["PATH"])
    proc = bench("--hostfile", str(cluster.hostfile), "--launcher", launcher,
                 "--container-exec", f"{apptainer} exec {image}", "--dataset", "synthetic", *FAST,
                 "--steps", "10", "--json", "--out", out_dir, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "ok" and rec["figures"]["world_size"] == 3
    assert rec["plan"]["container"] == [apptainer, "exec", "-B", os.path.abspath(out_dir), image]

    # Every command bench ran on a host went through the stand-in: the preflight, the
    # inventory, and one start per host (mpirun each rank; pdsh each node's launcher, bench.launch.node).
    lines = calls.read_text().splitlines()
    entry = {"openmpi": "-m bench.worker --run-dir", "pdsh": "-m bench.launch.node --world-info="}[launcher]
    starts = [line for line in lines if entry in line]
    assert sorted(line.split()[0] for line in starts) == cluster.hostnames, lines
    assert all(f"nv=no {image} python -u {entry}" in line for line in starts), lines
    for what in (f"{image} python -c", "-m bench probe --local --json" if launcher == "pdsh" else "-m bench.cluster.probe_mpi"):
        assert sorted(line.split()[0] for line in lines if what in line) == cluster.hostnames, (what, lines)

    # Each rank, on its own node, ran inside the stand-in (only it sets APPTAINER_CONTAINER).
    for rank in range(3):
        with open(os.path.join(rec["run_dir"], "logs", f"rank{rank}.log")) as f:
            starting = next(line for line in f if "worker pid" in line)
        assert f"in container {image}" in starting, starting
    assert {d["host"] for d in rec["provenance"]["devices"]} == set(cluster.hostnames)
