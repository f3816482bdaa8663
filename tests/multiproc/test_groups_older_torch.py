"""bench comm's process groups (bench.worker.groups.RoundGroups) on real gloo ranks of an older torch.

Why a second torch: RoundGroups' members-only way relies on torch naming a members-only group from
_world.group_count, which bench sets so that every member hashes the same name. torch 2.14.1 (the suite's) does;
torch 2.7.1, the Pascal image's (requirements-pascal.lock), salts _hash_ranks_to_str with len(_world.pg_names)
instead (distributed_c10d.py of its wheel, git e2d141db), and so does 2.13.0 (its wheel's distributed_c10d.py:
_process_group_name advances group_count on the unhashed path only). pg_names counts the groups a rank holds, so
after a members-only group the ranks outside it count one fewer: in a ring of 3 (round 0 {0, 1}, round 1 {1, 2})
rank 1 salts {1, 2} with 2 and rank 2 with 1, each rendezvous under its own store prefix in gloo's
connectFullMesh, and both wait until the timeout. bench must take its "world" way there (every rank makes every
group, in one order), and does since issue 48, by asking torch's own hash (groups.salted_by_counter).

The stand-in for the Pascal image's torch: 2.7.1 cannot be installed here without gigabytes of CUDA wheels, and
2.13.0 names groups exactly as 2.7.1 does (the lines above), so a CPU wheel of 2.13.0 for Python 3.11 that lies
on this machine's disk (/opt/wheels, pip's find-links) is installed into a venv made here: `python -m venv
--without-pip`, then pip --no-deps with that wheel and typing_extensions (the one other module `import
torch.distributed` needs; its pin is the Pascal lock's). About 5 s (measured 4.8 s at load 3.4). Three
ranks of it run RoundGroups over a ring of 3 (odd N: uneven membership) plus the whole world, an all_reduce in
each group checks each group works, and each rank prints the way it chose. On the code before issue 48 the
ranks hang in round 1 and the test kills them at RANKS_S.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
RANKS_S = 100  # three ranks importing torch on two busy cores take 5-20 s; a hang waits past this

RANK = textwrap.dedent("""
    import datetime, json, sys
    import torch
    import torch.distributed as dist
    from bench.worker.groups import RoundGroups, how

    rank, store = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=3,
                            timeout=datetime.timedelta(seconds=300))
    groups = [[0, 1], [1, 2], [2, 0], [0, 1, 2]]   # the ring of 3, then the whole world
    rounds = [[0], [1], [2], [3]]
    way = how(dist, "cpu", False)   # as bench comm's gloo ranks choose
    made = RoundGroups(dist, groups, rounds, rank, 3, way)
    sums = []
    for ri in range(len(rounds)):
        for gi, handle in made.enter(ri).items():
            t = torch.ones(1)
            dist.all_reduce(t, group=handle)
            sums.append([gi, int(t.item())])
        dist.barrier()
    print(json.dumps({"rank": rank, "torch": torch.__version__, "how": way, "sums": sums}), flush=True)
    dist.destroy_process_group()
""")


def _pin(name: str) -> str:
    text = (Path(REPO) / "requirements-pascal.lock").read_text()
    return re.search(rf"^{name}==\S+$", text, re.M).group(0)


@pytest.fixture(scope="module")
def older_torch(tmp_path_factory) -> Path:
    """A venv holding torch 2.13.0 (CPU) and typing_extensions alone; its python."""
    if not WHEEL.exists():
        pytest.skip(f"{WHEEL} is not on this machine (the stand-in for the Pascal image's torch 2.7.1)")
    venv = tmp_path_factory.mktemp("torch213") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-compile",
                    str(WHEEL), _pin("typing_extensions")], check=True, timeout=300)
    return py


def test_three_gloo_ranks_of_the_older_torch_make_uneven_rounds_of_groups(older_torch, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"}   # no numpy in the venv: torch warns at import
    store = tmp_path / "store"
    procs = [subprocess.Popen([str(older_torch), str(script), str(r), str(store)], env=env, cwd=str(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(3)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=RANKS_S))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the ranks hung past {RANKS_S} s: members-only groups named apart on torch 2.13.0")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    got = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert {g["torch"] for g in got} == {"2.13.0+cpu"}
    assert {g["how"] for g in got} == {"world"}
    # Each rank was in two pairs of the ring and the world; every all_reduce summed its group's ones.
    assert [g["sums"] for g in got] == [[[0, 2], [2, 2], [3, 3]], [[0, 2], [1, 2], [3, 3]],
                                        [[1, 2], [2, 2], [3, 3]]]
