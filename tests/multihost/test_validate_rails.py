"""validate's rails check on a cluster with two rails (tests/multihost/rails.py), the rails given as HCA names as on
nodes with Active InfiniBand/RoCE ports (issue 47 item 1): each HCA is mapped to its interface through
/sys/class/infiniband/<hca>/device/net/ (a fake sysfs entry per host, host_mounts.py: no HCA can exist here) and
measured there alone. One host's second rail slowed (a token bucket of 200 Mbit/s each way on its cable) is named
and drained; its first rail, and both rails of every other host, PASS; an HCA without an interface is a SKIP that
says why (issue 41 item 4, issue 47)."""

from __future__ import annotations

import contextlib

import pytest

from bench.core import results

from .host_mounts import fake_hcas
from .rails import IFNAME, second_rail
from .validate_runs import run_validate, said

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

HCAS = {"mlx5_0": "vb0", "mlx5_1": IFNAME, "mlx5_2": None}  # mlx5_2: an HCA with no network interface


def test_the_slow_rail_of_one_host_is_named_and_drained(own_hosts, tmp_path):
    c = own_hosts
    with second_rail(c) as rail, contextlib.ExitStack() as hosts:
        for h in c.hosts:
            hosts.enter_context(fake_hcas(c, h, HCAS, tmp_path))
        slow = c.hosts[1]
        rail.slow(slow, "200mbit")
        v = run_validate(c, tmp_path, "--checks", "inter-node,rails", "--rails", ",".join(HCAS), slots=1)
    rec = v.rec
    assert rec is not None, v.proc.stderr[-3000:]
    results.validate(rec)
    rows = {r["node"]: r for r in rec["checks"] if r["check"] == "rails"}
    assert set(rows) == {f"{h} {r}" for h in c.hosts for r in HCAS}, sorted(rows)
    bad = rows[f"{slow} mlx5_1"]
    assert bad["status"] == "FAIL", said([bad])
    assert f"GLOO_SOCKET_IFNAME={IFNAME}, mlx5_1's interface" in bad["reason"], bad["reason"]
    measured = {n: r for n, r in rows.items() if n != f"{slow} mlx5_1" and not n.endswith("mlx5_2")}
    assert {r["status"] for r in measured.values()} == {"PASS"}, said(list(measured.values()))
    assert all("GLOO_SOCKET_IFNAME=vb0, mlx5_0's interface" in rows[f"{h} mlx5_0"]["reason"] for h in c.hosts)
    for h in c.hosts:
        skip = rows[f"{h} mlx5_2"]
        assert skip["status"] == "SKIP" and "mlx5_2 has no network interface" in skip["reason"], said([skip])
    # The inter-node check, all of a node's ways out together (here vb0, GLOO_SOCKET_IFNAME's), saw nothing.
    assert {r["status"] for r in rec["checks"] if r["check"] == "inter-node"} == {"PASS"}
    assert [(e["host"], e["check"]) for e in rec["drain"]] == [(slow, "rails")], rec["drain"]
    assert v.proc.returncode == 1
    figs = rec["measured"]["rails"]
    assert set(figs) == {"mlx5_0", "mlx5_1"} and figs["mlx5_1"]["nodes"][slow] < 0.5 * figs["mlx5_0"]["nodes"][slow]
