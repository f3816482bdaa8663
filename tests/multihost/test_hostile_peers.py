"""bench's hub under hostile peers during real 3-host launches (issue 46), on runs the suite makes anyway:

- a stranger (tests/hostile.Stranger: 100,000 `[`, a 64 MiB line without its newline, 64 KiB of newlines,
  bytes that are not JSON, 2,000 idle connections) at the hub of `bench run --launcher pdsh`
  (test_run_multihost.test_three_hosts, which also compares its figures' shape with openmpi's run without one)
  and of every launch of the healthy `bench validate` (conftest.healthy_validate, whose tests all still hold);
- a forger who read hub.json (tests/hostile.with_token) at the SIGSTOPped run of test_hangs ("sigstop, long"),
  from the stall to bench's exit: hellos for every rank and outside the world, dones, a barrier of count 0, a
  progress every 0.1 s.

hub.json is 0600: the test reads it as root, as no other user of a cluster can.
"""

from __future__ import annotations

import os
import re

import pytest

from tests import hostile

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def test_a_stranger_at_every_launch_of_a_validate_changed_nothing(healthy_validate):
    v = healthy_validate
    assert v.proc.returncode == 0, v.proc.stderr[-3000:]   # every row PASS: test_validate's healthy test
    attacked = [launch for launch in v.stranger if "error" not in launch["seen"]]
    assert attacked, v.stranger  # at least one launch lived through every attack
    for launch in attacked:
        print(f"\n{os.path.basename(launch['run_dir'])}: {hostile.changed_nothing(launch)}")


def test_a_forger_with_the_token_speaks_for_no_rank_and_hides_no_hang(stalls, cluster):
    from tests.multihost.test_hangs import GRACE_S

    h = stalls.part("hangs")["sigstop, long"]
    f = h.forged
    assert f is not None, "the forger never ran"
    print(f"\nforger at the hung run: {f}")
    assert [f[f"hello {r}"] for r in range(3)] == [f"refused: rank {r} already said hello" for r in range(3)], f
    assert f["hello 3"] == f["hello 10"] == f["hello -1"] == "closed", f
    assert f["progress sent"] >= 50, f  # every 0.1 s from the stall until bench named the hang
    # The hang is still a hang, caught in time and named with its collective: the forged progress was no
    # liveness, the forged dones counted no rank.
    assert h.run.proc.returncode == 1 and h.took_s <= h.watchdog_s + GRACE_S, (h.took_s, h.run.stderr[-2000:])
    assert re.fullmatch(rf"bench: failed: hung at step \d+: rank 1 on {cluster.hostnames[1]} did not answer: its "
                        r"process was stopped \(state T: SIGSTOP, or a debugger\); 2 ranks waited in all_reduce #\d+",
                        h.line()), h.line()
    with open(os.path.join(h.run.run_dir, "logs", "hub.log")) as log:
        said = log.read()
    assert "refused: a second hello for rank 1" in said and "hello: rank 3 is not an integer in 0..2" in said, said
