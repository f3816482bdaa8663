"""InfiniBand/RoCE port health from recorded `ibstat`, `ibqueryerrors` and sysfs counter outputs
(tests/fixtures/health, tests/fixtures/net), and GPUDirect RDMA's module on a /sys tree built in tmp_path."""

from __future__ import annotations

import re

import pytest

from bench.cluster.health.infiniband import (counter_findings, gpudirect_findings, parse_ibqueryerrors,
                                             port_findings, read_dir)
from bench.cluster.interconnect import parse_ibstat
from tests.health_fixtures import HEALTH, NET, codes, text


def ports(path) -> list[dict]:
    return parse_ibstat(text(path))


def test_three_ethernet_ports_down_beside_an_active_one_fail_and_the_400g_infiniband_rails_pass():
    got = port_findings(ports(HEALTH / "ibstat_12-hca_3-ports-down-disabled.txt"))
    assert [(f["code"], f["severity"], f["action"], f["port"]) for f in got] == [
        ("ib-port-down", "fail", "reseat", "mlx5_2/1"), ("ib-port-down", "fail", "reseat", "mlx5_7/1"),
        ("ib-port-down", "fail", "reseat", "mlx5_8/1")]
    assert "Disabled" in got[0]["what"] and "1 other Ethernet port(s) Active" in got[0]["what"]


def test_a_node_whose_only_port_is_down_polling_fails():
    got = port_findings(ports(HEALTH / "ibstat_mlx5_10-down-polling_guids-redacted_excerpt.txt"))
    assert [(f["code"], f["severity"], f["action"], f["port"]) for f in got] == [("ib-port-down", "fail", "reseat", "mlx5_10/1")]


def test_a_port_with_its_physical_link_up_but_down_waits_for_the_subnet_manager():
    got = port_findings(ports(HEALTH / "ibstat_mlx5_7_state-down-physical-linkup_sriov-pod.txt"))
    assert [(f["code"], f["severity"], f["action"], f["port"]) for f in got] == [("ib-port-no-sm", "fail", "check-fabric", "mlx5_7/1")]


@pytest.mark.parametrize("name", ["ibstat_cx7-ndr400-ib_2-cas.txt", "ibstat_cx6dx-100g-roce.txt"])
def test_healthy_ibstat_gives_no_finding(name):
    assert port_findings(ports(NET / name)) == []


def test_a_port_slower_than_its_active_peers_is_a_warning():
    """The recorded ibstat outputs have no Active port slower than its peers: one 400 Gb/s record is changed
    to 200 here to check the rule (the fixture file itself is untouched)."""
    ps = ports(NET / "ibstat_cx7-ndr400-ib_2-cas.txt")
    ps[1]["rate_gbps"] = 200.0
    assert [(f["code"], f["severity"], f["action"], f["port"]) for f in port_findings(ps)] == [
        ("ib-port-slow", "warn", "reseat", "mlx5_1/1")]


def sysfs_from_dump(dump: str, port_dir) -> None:
    """Write the counters of a `for f in counters/*; echo === f ===; cat f` dump as the files they were."""
    for name, value in re.findall(r"^=== \./(\S+) ===\n(\S+)", dump, re.M):
        (port_dir / "counters").mkdir(parents=True, exist_ok=True)
        (port_dir / "counters" / name).write_text(value + "\n")


def test_sysfs_counters_at_255_and_65535_are_errors_that_say_they_saturated(tmp_path):
    sysfs_from_dump(text(HEALTH / "sysfs-ib-counters_mlx5_1_link-downed-255-xmit-discards-65535.txt"),
                    tmp_path / "mlx5_1" / "ports" / "1")
    got = counter_findings(read_dir(str(tmp_path)))
    assert [(f["code"], f["severity"], f["action"], f["port"]) for f in got] == [("ib-errors", "warn", "watch", "mlx5_1/1")]
    what = got[0]["what"]
    for part in ("link_downed 255 (saturated)", "port_xmit_discards 65535 (saturated)",
                 "excessive_buffer_overrun_errors 15 (saturated)", "port_rcv_switch_relay_errors 2"):
        assert part in what
    assert "port_xmit_wait" not in what and "symbol_error" not in what   # congestion, and a zero


def test_ibqueryerrors_counters_are_errors():
    got = counter_findings(parse_ibqueryerrors(text(HEALTH / "ibqueryerrors_linkdowned-rcverrors-xmitdiscards_line.txt")))
    assert codes(got) == [("ib-errors", "warn", "watch", None)]
    assert got[0]["what"] == "GUID 0x1070fd0300370ea2 port ALL: link_downed 25, port_rcv_errors 26, port_xmit_discards 2846"


def test_gpus_and_active_rdma_ports_without_nvidia_peermem_warn_and_with_it_pass(tmp_path):
    ps = ports(NET / "ibstat_cx7-ndr400-ib_2-cas.txt")
    (tmp_path / "module").mkdir()
    assert codes(gpudirect_findings(ps, True, str(tmp_path))) == [("gpudirect-rdma-missing", "warn", "reboot", None)]
    assert gpudirect_findings(ps, False, str(tmp_path)) == []     # a CPU node: nothing to check
    (tmp_path / "module" / "nvidia_peermem").mkdir()
    assert gpudirect_findings(ps, True, str(tmp_path)) == []
