"""bench.worker.wire and the record's wire figures, on a sysfs tree laid out as the kernel's.

The namespace hosts' real veth counters are tests/multihost/test_wire.py's;
InfiniBand cannot exist here, so its port counters are files in the
kernel's layout (/sys/class/infiniband/<dev>/ports/<p>/counters/port_xmit_data,
in units of 4 bytes).
"""

from __future__ import annotations

import pytest

from bench.analysis.step_comm import WIRE_ONE_HOST, WIRE_SHARED_HOST, wire_figures
from bench.worker import wire


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    net, ib = tmp_path / "net", tmp_path / "infiniband"

    def nic(name: str, tx: int, bridge: bool = False) -> None:
        (net / name / "statistics").mkdir(parents=True, exist_ok=True)
        (net / name / "statistics" / "tx_bytes").write_text(f"{tx}\n")
        if bridge:
            (net / name / "bridge").mkdir(exist_ok=True)

    def port(dev: str, p: int, words: int) -> None:
        d = ib / dev / "ports" / str(p) / "counters"
        d.mkdir(parents=True, exist_ok=True)
        (d / "port_xmit_data").write_text(f"{words}\n")

    monkeypatch.setattr(wire, "_NET", str(net))
    monkeypatch.setattr(wire, "_IB", str(ib))
    return nic, port


def test_the_interfaces_counted_follow_the_backends_variable(sysfs):
    nic, _ = sysfs
    for name in ("lo", "eth0", "eth1", "ib0", "docker0"):
        nic(name, 100)
    nic("br0", 100, bridge=True)
    assert sorted(wire.nic_counters("gloo", {})) == ["docker0", "eth0", "eth1", "ib0"]  # no lo, no bridge
    assert sorted(wire.nic_counters("gloo", {"GLOO_SOCKET_IFNAME": "eth1"})) == ["eth1"]
    # NCCL's rules: a prefix, =exact, ^excluded prefixes
    assert sorted(wire.nic_counters("nccl", {"NCCL_SOCKET_IFNAME": "eth"})) == ["eth0", "eth1"]
    assert sorted(wire.nic_counters("nccl", {"NCCL_SOCKET_IFNAME": "=eth1,ib"})) == ["eth1", "ib0"]
    assert sorted(wire.nic_counters("nccl", {"NCCL_SOCKET_IFNAME": "^docker,lo"})) == ["br0", "eth0", "eth1", "ib0"]


def test_infiniband_counts_in_words_of_four_bytes_and_the_larger_source_wins(sysfs):
    nic, port = sysfs
    nic("ib0", 1000)
    port("mlx5_0", 1, 10)
    w = wire.Wire("nccl", {"NCCL_SOCKET_IFNAME": "ib0"})
    w.start()
    nic("ib0", 1000 + 4_000)          # IPoIB: the same traffic on the interface and on its port
    port("mlx5_0", 1, 10 + 2_000)     # 2,000 words = 8,000 bytes: plus RDMA the interface never sees
    w.stop()
    got = w.result()
    assert got == {"bytes": 8_000, "source": "ib", "nic": {"ib0": 4_000}, "ib": {"mlx5_0/1": 8_000}}


def test_a_32_bit_port_at_its_maximum_is_named(sysfs):
    _, port = sysfs
    port("mthca0", 1, 2**32 - 10)
    w = wire.Wire("nccl", {})
    w.start()
    port("mthca0", 1, 2**32 - 1)
    w.stop()
    assert w.result()["saturated"] == ["mthca0/1"]


def test_no_counters_or_no_window_is_null_with_the_reason(sysfs):
    w = wire.Wire("gloo", {})
    assert w.result()["bytes"] is None and "not read" in w.result()["reason"]
    w.start()
    w.stop()
    assert w.result() == {"bytes": None, "reason": "no network interface or InfiniBand port counter to read on this host"}


def _rank(rank: int, host: str, tx: int | None, steps: int = 4) -> dict:
    w = {"bytes": tx, "source": "nic", "nic": {"vb0": tx}, "ib": {}} if tx is not None else None
    return {"rank": rank, "host": host, "steady_steps": steps, "wire": w}


def test_the_wire_per_rank_and_step_over_what_the_algorithm_sent():
    # 2 hosts, 1 rank each, 4 steady steps: 4.1 MB and 3.9 MB left the hosts, 1 MB sent per rank and step
    got = wire_figures([_rank(0, "a", 4_100_000), _rank(1, "b", 3_900_000)], sent_per_step=1e6)
    assert got["bytes_per_step"] == pytest.approx(1e6) and got["over_sent"] == pytest.approx(1.0)
    assert [h["bytes_per_step_per_rank"] for h in got["per_host"]] == [1_025_000, 975_000]
    assert "note" not in got
    # two ranks on a host: one read its counters, the host's bytes are divided by its ranks, and it says so
    shared = wire_figures([_rank(0, "a", 8e6), _rank(1, "a", None), _rank(2, "b", 4e6)], sent_per_step=1e6)
    assert [h["ranks"] for h in shared["per_host"]] == [2, 1] and shared["note"] == WIRE_SHARED_HOST
    assert wire_figures([_rank(0, "a", 1e6), _rank(1, "a", None)], 1e6) == {"bytes_per_step": None,
                                                                            "reason": WIRE_ONE_HOST}
    old = wire_figures([{"rank": 0, "host": "a", "steady_steps": 4}, _rank(1, "b", 1e6)], 1e6)
    assert old["bytes_per_step"] is None and old["reason"] == "a: no rank of it read the counters"
