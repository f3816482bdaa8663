"""The rails check's parts without a launch: NCCL's INFO log read back (recorded real logs,
tests/fixtures/nccl/SOURCES.md), each rail's environment, an HCA's interface from sysfs, and the rows a rail
gets when NCCL's traffic went elsewhere (issue 47 item 1). The launch itself runs in
tests/multihost/test_validate_rails.py (CPU) and on GPU nodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.launch import nccl_net

NCCL = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def _lines(name: str, host: str | None = None) -> str:
    text = (NCCL / name).read_text()
    return text if host is None else "".join(ln + "\n" for ln in text.splitlines() if ln.startswith(f"{host}:"))


# --------------------------------------------------------------------------- NCCL's log, parsed
def test_a_plugins_fused_devices_and_channels_are_read():
    seen = nccl_net.parse(_lines("nccl-tests-373_ib-disable-ignored-by-ibext-v8-plugin_excerpt.log"))
    assert seen.devices == {"IB": {0: ["mlx5_2", "mlx5_3"], 1: ["mlx5_0", "mlx5_1"]}}
    assert seen.chosen == {"IBext_v8"} and seen.channels == {("IBext_v8", 1)}
    assert nccl_net.used(seen) == ({"IBext_v8"}, {"mlx5_0", "mlx5_1"})


def test_a_socket_fallback_is_read_with_the_transport_that_found_no_device():
    seen = nccl_net.parse(_lines("nccl-1267_no-ib-device-socket-fallback_excerpt.log"))
    assert seen.no_device == {"IB"} and seen.chosen == {"Socket"} and seen.devices == {"Socket": {0: ["ens7"]}}
    assert nccl_net.carried(seen, "Socket", "ens7") == (True, "NCCL used network Socket over ens7 (IB: no device "
                                                               "found)")


def test_older_channel_lines_name_their_transport_and_device():
    seen = nccl_net.parse(_lines("nccl-634_socket-channels-old-format_excerpt.log"))
    assert seen.channels == {("Socket", 0)} and not seen.devices
    ok, said = nccl_net.carried(seen, "Socket", "eth0")
    assert not ok and "Socket device 0 (not listed)" in said


@pytest.mark.parametrize("fixture, host, want, device, ok, words", [
    # NCCL_IB_HCA=mlx5_4 honoured: one HCA, the IB transport.
    ("nccl-1052_ib-hca-mlx5_4-roce-two-nodes_excerpt.log", "node2", "IB", "mlx5_4", True, "network IB over mlx5_4"),
    ("nccl-1052_ib-hca-mlx5_4-roce-two-nodes_excerpt.log", "node4", "IB", "mlx5_4", True, "over mlx5_4"),
    # Asked for one HCA, NCCL took two.
    ("nccl-tests-185_two-roce-hcas-dgx-h100_excerpt.log", "dgxh100-4", "IB", "mlx5_10", False,
     "over mlx5_10, mlx5_11, not mlx5_10 alone"),
    # Asked for an HCA, NCCL found none and fell back to sockets.
    ("nccl-1267_no-ib-device-socket-fallback_excerpt.log", None, "IB", "mlx5_0", False, "not its IB transport"),
    # Asked for the socket transport (NCCL_IB_DISABLE=1), the plugin still sent over two HCAs.
    ("nccl-tests-373_ib-disable-ignored-by-ibext-v8-plugin_excerpt.log", None, "Socket", "bond0.526", False,
     "network IBext_v8 over mlx5_0, mlx5_1, not its Socket transport"),
    # Asked for one interface, NCCL's sockets spread over two.
    ("nccl-tests-188_ib-disabled-two-socket-interfaces_excerpt.log", None, "Socket", "ibs85f0", False,
     "over ib0, ibs85f0, not ibs85f0 alone"),
])
def test_what_nccl_used_is_told_from_what_was_asked(fixture, host, want, device, ok, words):
    got, said = nccl_net.carried(nccl_net.parse(_lines(fixture, host)), want, device)
    assert got is ok and words in said, said


def test_a_log_without_nccls_network_lines_passes_nothing():
    ok, said = nccl_net.carried(nccl_net.parse("rank 0: step 1\nNCCL version 2.21.5+cuda12.4\n"), "IB", "mlx5_0")
    assert not ok and "names no network" in said


# --------------------------------------------------------------------------- a rail's environment
def _validation(device: str, raw_of: dict[str, dict], rails=("mlx5_0", "mlx5_1"), hosts=("n1", "n2", "n3")):
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    v = Validation(ValidateConfig(checks=("rails",), rails=rails), HostSelection(), {h: [0] for h in hosts},
                   references.load(), "/nonexistent")
    v.device = device
    v.inventory = {h: {"interconnect": {"raw": raw_of[h]}} for h in hosts}
    return v


def _raw(netdevs: dict[str, list[str]], ifaces=("lo", "eth0")) -> dict:
    ports = [{"ca": ca, "port": 1, "state": "Active"} for ca in netdevs]
    return {"sysfs_ib": ports, "ib_netdevs": netdevs, "net": [{"name": n} for n in ifaces]}


def test_an_hca_rail_on_gpus_confines_nccl_to_it_whatever_the_shell_inherited(monkeypatch):
    from bench.validate.rail_env import rail_plan

    monkeypatch.setenv("NCCL_NET", "Socket")
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    monkeypatch.setenv("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p")
    v = _validation("cuda", dict.fromkeys(("n1", "n2", "n3"), _raw({"mlx5_0": ["ibp1"], "mlx5_1": ["ibp2"]})))
    plan = rail_plan(v, "mlx5_0", v.good)
    env = plan.environ
    assert (env["NCCL_IB_HCA"], env["NCCL_NET"], env["NCCL_IB_DISABLE"]) == ("=mlx5_0", "IB", "0")
    assert env["NCCL_DEBUG"] == "INFO" and "NET" in env["NCCL_DEBUG_SUBSYS"] and "NCCL_DEBUG_FILE" not in env
    assert plan.expect == ("IB", "mlx5_0") and plan.hosts == ["n1", "n2", "n3"] and not plan.skip


def test_an_interface_rail_on_gpus_forces_the_socket_transport_and_says_so(monkeypatch):
    from bench.validate.rail_env import rail_plan

    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0,mlx5_1")
    v = _validation("cuda", dict.fromkeys(("n1", "n2", "n3"), _raw({"mlx5_0": ["ibp1"]}, ("lo", "eth0", "eth1"))),
                    rails=("eth0", "eth1"))
    plan = rail_plan(v, "eth1", v.good)
    assert (plan.environ["NCCL_NET"], plan.environ["NCCL_SOCKET_IFNAME"]) == ("Socket", "=eth1")
    assert plan.environ["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in plan.environ
    assert plan.expect == ("Socket", "eth1") and "socket transport forced" in plan.how


def test_an_hca_rail_on_cpu_is_its_interface_and_one_without_is_skipped_with_the_reason():
    from bench.validate.rail_env import rail_plan

    raw = _raw({"mlx5_0": ["ibp12s0"], "mlx5_1": ["ibp13s0"], "mlx5_2": []})
    v = _validation("cpu", dict.fromkeys(("n1", "n2", "n3"), raw))
    ok = rail_plan(v, "mlx5_1", v.good)
    assert ok.environ["GLOO_SOCKET_IFNAME"] == "ibp13s0" and "mlx5_1's interface" in ok.how and ok.expect is None
    none = rail_plan(v, "mlx5_2", v.good)
    assert none.skip and "no network interface" in none.skip and "/sys/class/infiniband/mlx5_2/device/net/" in none.skip


def test_an_hca_whose_interface_differs_between_nodes_or_is_missing_on_one_is_said():
    from bench.validate.rail_env import rail_plan

    v = _validation("cpu", {"n1": _raw({"mlx5_0": ["ib0"]}), "n2": _raw({"mlx5_0": ["ib1"]}),
                            "n3": _raw({"mlx5_1": ["ib0"]})})
    plan = rail_plan(v, "mlx5_0", v.good)
    assert plan.hosts == ["n1", "n2"] and "n3" in plan.missing and "mlx5_1" in plan.missing["n3"]
    assert plan.skip and "differs between nodes (ib0, ib1)" in plan.skip


def test_each_hcas_interfaces_are_read_from_sysfs(tmp_path):
    from bench.cluster.interconnect import read_ib_netdevs

    for ca, devs in (("mlx5_0", ["ibp12s0"]), ("mlx5_1", []), ("mlx5_bond_0", ["bond0"])):
        (tmp_path / "class" / "infiniband" / ca / "device" / "net").mkdir(parents=True)
        for d in devs:
            (tmp_path / "class" / "infiniband" / ca / "device" / "net" / d).mkdir()
    assert read_ib_netdevs(str(tmp_path)) == {"mlx5_0": ["ibp12s0"], "mlx5_1": [], "mlx5_bond_0": ["bond0"]}
    assert read_ib_netdevs(str(tmp_path / "none")) == {}


# --------------------------------------------------------------------------- a rail's rows from NCCL's log
def test_a_node_whose_nccl_sent_over_another_hca_than_asked_is_an_error_not_a_pass(monkeypatch, tmp_path):
    """Rail mlx5_4 on three GPU nodes: n1's and n3's ranks log NCCL on mlx5_4 alone (nccl#1052's two nodes), n2's
    log NCCL over mlx5_10 and mlx5_11 (nccl-tests#185): its figure is not the rail's, so its row is an ERROR,
    whatever its bandwidth; the others are judged on their figures."""
    from bench.validate import rails, runs

    logs = {0: _lines("nccl-1052_ib-hca-mlx5_4-roce-two-nodes_excerpt.log", "node2"),
            1: _lines("nccl-tests-185_two-roce-hcas-dgx-h100_excerpt.log", "dgxh100-4"),
            2: _lines("nccl-1052_ib-hca-mlx5_4-roce-two-nodes_excerpt.log", "node4")}
    raw = _raw({"mlx5_4": ["enp24s0np0"], "mlx5_5": ["enp25s0np0"]})
    v = _validation("cuda", dict.fromkeys(("n1", "n2", "n3"), raw), rails=("mlx5_4", "mlx5_5"))
    asked = []

    def comm(v_, resources, groups, names, rounds, sizes, tag, with_numerics=False, environ=None):
        run_dir = tmp_path / tag
        (run_dir / "logs").mkdir(parents=True)
        for rank, text in logs.items():
            (run_dir / "logs" / f"rank{rank}.log").write_text(text if tag == "rails-mlx5_4" else "")
        asked.append((tag, environ))
        return {"run_dir": str(run_dir), "rows": [{"group": n, "busbw": 10e9, "wrong": 0} for n in names]}

    monkeypatch.setattr(runs, "comm", comm)
    rails.rails(v)
    rows = {c.node: c for c in v.checks if c.check == "rails"}
    assert [tag for tag, _ in asked] == ["rails-mlx5_4", "rails-mlx5_5"]
    assert asked[0][1]["NCCL_IB_HCA"] == "=mlx5_4" and asked[0][1]["NCCL_NET"] == "IB"
    assert rows["n2 mlx5_4"].status == "ERROR", rows["n2 mlx5_4"]
    assert "over mlx5_10, mlx5_11, not mlx5_4 alone" in rows["n2 mlx5_4"].reason
    assert {rows["n1 mlx5_4"].status, rows["n3 mlx5_4"].status} == {"PASS"}, rows
    # A rail whose ranks logged nothing of NCCL's network passes no node: nothing says it was that rail.
    assert {rows[f"{h} mlx5_5"].status for h in ("n1", "n2", "n3")} == {"ERROR"}
    assert "names no network" in rows["n1 mlx5_5"].reason
    assert v.figures["rails"]["mlx5_4"]["strays"] == {"n2": rows["n2 mlx5_4"].reason.split(": ", 1)[1]}
    assert "n2" in v.failed_hosts and os.path.isdir(tmp_path / "rails-mlx5_4")
