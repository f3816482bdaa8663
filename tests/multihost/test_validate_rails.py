"""validate's rails check on a cluster with two rails (tests/multihost/rails.py): one host's second rail slowed
(a token bucket of 200 Mbit/s each way on its cable) is named and drained; its first rail, and both rails of every other host,
PASS (issue 41 item 4)."""

from __future__ import annotations

import pytest

from bench.core import results

from .rails import IFNAME, second_rail
from .validate_runs import run_validate

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def test_the_slow_rail_of_one_host_is_named_and_drained(cluster_factory, tmp_path):
    c = cluster_factory(3)
    with second_rail(c) as rail:
        slow = c.hosts[1]
        rail.slow(slow, "200mbit")
        v = run_validate(c, tmp_path, "--checks", "inter-node,rails", "--rails", f"vb0,{IFNAME}", slots=1)
    rec = v.rec
    assert rec is not None, v.proc.stderr[-3000:]
    results.validate(rec)
    rows = {r["node"]: r for r in rec["checks"] if r["check"] == "rails"}
    assert set(rows) == {f"{h} {r}" for h in c.hosts for r in ("vb0", IFNAME)}, sorted(rows)
    assert rows[f"{slow} {IFNAME}"]["status"] == "FAIL", rows[f"{slow} {IFNAME}"]
    assert IFNAME in rows[f"{slow} {IFNAME}"]["reason"] and "GLOO_SOCKET_IFNAME" in rows[f"{slow} {IFNAME}"]["reason"]
    assert {n: r["status"] for n, r in rows.items() if n != f"{slow} {IFNAME}"} == \
        {n: "PASS" for n in rows if n != f"{slow} {IFNAME}"}, rows
    # The inter-node check, all of a node's ways out together (here vb0, GLOO_SOCKET_IFNAME's), saw nothing.
    assert {r["status"] for r in rec["checks"] if r["check"] == "inter-node"} == {"PASS"}
    assert [(e["host"], e["check"]) for e in rec["drain"]] == [(slow, "rails")], rec["drain"]
    assert v.proc.returncode == 1
    figs = rec["measured"]["rails"]
    assert set(figs) == {"vb0", IFNAME} and figs[IFNAME]["nodes"][slow] < 0.5 * figs["vb0"]["nodes"][slow], figs
