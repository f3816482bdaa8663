"""The interconnect probe: parsers on recorded nvidia-smi/ibstat outputs, sysfs readers on trees built from
recorded sysfs values (tests/fixtures/net/SOURCES.md), the kinds they give, and collect() end to end."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from bench.cluster.interconnect import (
    classify,
    collect,
    parse_ibstat,
    read_sysfs_ib,
    read_sysfs_net,
    read_sysfs_pci,
)
from bench.cluster.accel.nvidia.topo import parse_nvlink_status, parse_topo_matrix
from bench.cluster.probe import node_inventory
from bench.cluster.accel.nvidia.smi import parse_nvidia_smi_table, parse_query_csv

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GPU, NET = FIX / "gpu", FIX / "net"


def text(path: Path) -> str:
    return path.read_text()


def topo(name: str) -> dict:
    return parse_topo_matrix(text(GPU / name))


def gpus_of(name: str, parser=parse_nvidia_smi_table) -> list[dict]:
    """A fixture's GPUs as the probe completes them (model and a table compute capability)."""
    return node_inventory("n", parser(text(GPU / name)))["gpus"]


def cc_gpus(n: int, cc: str) -> list[dict]:
    # For matrices recorded without their GPU listing: only what classify reads of a GPU.
    return [{"index": i, "name": None, "cc": cc, "pci_bus_id": None} for i in range(n)]


# ---- nvidia-smi topo -m ----------------------------------------------------------------------


def test_topo_a100x8_devices_links_and_nic_legend():
    t = topo("nvidia-smi-topo_a100x8.txt")
    assert t["error"] is None
    assert t["devices"] == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(4)]
    assert t["links"]["GPU0"]["GPU7"] == "NV12" and t["links"]["GPU0"]["NIC0"] == "PXB"
    assert t["links"]["NIC2"]["NIC3"] == "PIX" and "GPU0" not in t["links"]["GPU0"]
    assert t["nics"] == {f"NIC{i}": f"mlx5_{i}" for i in range(4)}


def test_topo_h200x8_tabs_and_gpu_numa_column():
    t = topo("nvidia-smi-topo_h200x8.txt")
    assert len(t["devices"]) == 16 and t["nics"]["NIC7"] == "mlx5_7"
    assert {v for a, row in t["links"].items() if a.startswith("GPU") for b, v in row.items()
            if b.startswith("GPU")} == {"NV18"}  # fmt: skip
    assert t["links"]["GPU4"]["NIC6"] == "PIX" and t["links"]["NIC7"]["GPU5"] == "PIX"


def test_topo_older_driver_names_the_nic_column_itself():
    t = topo("nvidia-smi-topo_4gpu-nv2_mlx5-column.txt")
    assert t["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0"]
    assert t["nics"] == {"mlx5_0": "mlx5_0"} and t["links"]["mlx5_0"]["GPU3"] == "NODE"


def test_topo_spaces_and_a_cut_nic_legend():
    t = topo("nvidia-smi-topo_a100x4_nv4_partial.txt")
    assert t["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": None, "NIC3": None}
    assert t["links"]["GPU3"]["NIC3"] == "PXB" and t["links"]["NIC3"]["NIC2"] == "SYS"


def test_topo_pcie_only_pair_and_other_text():
    assert topo("nvidia-smi-topo_rtx5090x2_phb.txt")["links"] == {"GPU0": {"GPU1": "PHB"}, "GPU1": {"GPU0": "PHB"}}
    bad = parse_topo_matrix(text(GPU / "nvidia-smi_t4x5.txt"))
    assert bad["devices"] == [] and "not nvidia-smi topo -m" in bad["error"]


# ---- nvidia-smi nvlink -s, ibstat ------------------------------------------------------------


def test_nvlink_status_rates_and_inactive_links():
    a100 = parse_nvlink_status(text(GPU / "nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt"))
    assert sorted(a100) == [0, 1] and [ln["gbps"] for ln in a100[1]] == [25.0] * 12
    v100 = parse_nvlink_status(text(GPU / "nvidia-smi-nvlink-s_v100-sxm2-32gb_two-inactive_excerpt.txt"))
    assert v100 == {3: [{"link": i, "gbps": None if i in (3, 5) else 25.781} for i in range(6)]}
    assert parse_nvlink_status(text(GPU / "nvidia-smi-failed_no-driver.txt")) == {}


@pytest.mark.parametrize("name, expected", [
    ("ibstat_cx7-ndr400-ib_2-cas.txt", [("mlx5_0", 1, "Active", "LinkUp", 400.0, "InfiniBand"),
                                        ("mlx5_1", 1, "Active", "LinkUp", 400.0, "InfiniBand")]),
    ("ibstat_cx6dx-100g-roce.txt", [("mlx5_0", 1, "Active", "LinkUp", 100.0, "Ethernet"),
                                    ("mlx5_1", 1, "Active", "LinkUp", 100.0, "Ethernet")]),
    ("ibstat_cx7-roce200-and-a-down-port_partial.txt", [("mlx5_0", 1, "Active", "LinkUp", 200.0, "Ethernet"),
                                                        ("mlx5_1", 1, "Active", "LinkUp", 200.0, "Ethernet"),
                                                        ("mlx5_10", 1, "Down", "Disabled", None, None)]),
    ("ibstat_cx3-fdr56-2port_partial.txt", [("mlx4_0", 1, "Down", "Disabled", 10.0, "InfiniBand"),
                                            ("mlx4_0", 2, "Active", "LinkUp", 56.0, None)]),
])  # fmt: skip
def test_ibstat_ports(name, expected):
    keys = ("ca", "port", "state", "physical_state", "rate_gbps", "link_layer")
    assert [tuple(p[k] for k in keys) for p in parse_ibstat(text(NET / name))] == expected


# ---- sysfs, from trees of recorded values ----------------------------------------------------


def write(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def net_iface(sys: Path, name: str, device: str, **files: str) -> None:
    """/sys/class/net/NAME as the kernel lays it out: a link into the device tree."""
    d = sys / "devices" / device / "net" / name
    for key, value in files.items():
        write(d / key, value)
    (sys / "class" / "net").mkdir(parents=True, exist_ok=True)
    (sys / "class" / "net" / name).symlink_to(Path("../../devices") / device / "net" / name)


@pytest.fixture
def fake_sys(tmp_path) -> Path:
    sys = tmp_path / "sys"
    # This build machine's virtio NIC and loopback; the veth and bridge made here; a 100 GbE port's speed.
    net_iface(sys, "eth0", "pci0000:00/0000:00:03.0/virtio2", speed="-1", operstate="up", type="1")
    net_iface(sys, "lo", "virtual", operstate="unknown", type="772")   # lo's speed is unreadable (EINVAL)
    net_iface(sys, "vrefs0", "virtual", speed="10000", operstate="up", type="1")
    net_iface(sys, "brrefs0", "virtual", speed="-1", operstate="unknown", type="1")
    (sys / "devices" / "virtual" / "net" / "brrefs0" / "bridge").mkdir()
    net_iface(sys, "ens3f0", "pci0000:80/0000:80:01.0/0000:81:00.0", speed="100000", operstate="up", type="1")
    # RoCE ports as ibstatus shows their sysfs files (DeepEP#17).
    for ca, rate in (("mlx5_0", "200 Gb/sec (4X HDR)"), ("mlx5_1", "400 Gb/sec (4X NDR)")):
        port = sys / "class" / "infiniband" / ca / "ports" / "1"
        for key, value in (("rate", rate), ("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("link_layer", "Ethernet")):
            write(port / key, value)
    # A Gen4 x16 GPU in a Gen3 x16 port (NCCL's kvDictPciGen spellings of both kernels).
    gpu = sys / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0"
    write(gpu / "max_link_speed", "16.0 GT/s PCIe"), write(gpu / "max_link_width", "16")
    write(gpu.parent / "max_link_speed", "8 GT/s"), write(gpu.parent / "max_link_width", "16")
    (sys / "bus" / "pci" / "devices").mkdir(parents=True)
    (sys / "bus" / "pci" / "devices" / "0000:01:00.0").symlink_to("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0")
    return sys


def test_sysfs_net_speeds_states_and_virtual(fake_sys):
    got = {i["name"]: i for i in read_sysfs_net(str(fake_sys))}
    assert sorted(got) == ["brrefs0", "ens3f0", "eth0", "lo", "vrefs0"]
    assert (got["eth0"]["speed_mbps"], got["eth0"]["virtual"], got["eth0"]["operstate"]) == (None, False, "up")
    assert (got["ens3f0"]["speed_mbps"], got["ens3f0"]["virtual"]) == (100000, False)
    assert (got["vrefs0"]["speed_mbps"], got["vrefs0"]["virtual"], got["vrefs0"]["bridge"]) == (10000, True, False)
    assert got["brrefs0"]["bridge"] and got["brrefs0"]["speed_mbps"] is None
    assert (got["lo"]["virtual"], got["lo"]["type"], got["lo"]["speed_mbps"]) == (True, 772, None)


def test_sysfs_net_of_this_machine():
    got = {i["name"]: i for i in read_sysfs_net()}
    assert got["lo"]["virtual"] and got["lo"]["type"] == 772
    for name, iface in got.items():   # virtual exactly when the device lies under /sys/devices/virtual
        assert iface["virtual"] == os.path.realpath(f"/sys/class/net/{name}").startswith("/sys/devices/virtual/")


def test_sysfs_ib_reads_like_ibstat(fake_sys):
    ports = read_sysfs_ib(str(fake_sys))
    assert [(p["ca"], p["port"], p["state"], p["physical_state"], p["rate_gbps"], p["link_layer"]) for p in ports] == [
        ("mlx5_0", 1, "Active", "LinkUp", 200.0, "Ethernet"), ("mlx5_1", 1, "Active", "LinkUp", 400.0, "Ethernet")]
    assert set(ports[0]) == set(parse_ibstat(text(NET / "ibstat_cx6dx-100g-roce.txt"))[0])
    assert read_sysfs_ib(str(fake_sys / "nothing")) == []


def test_sysfs_pci_takes_the_slower_end_of_the_link(fake_sys):
    assert read_sysfs_pci(["00000000:01:00.0", "00000000:02:00.0", None], str(fake_sys)) == {
        "00000000:01:00.0": {"speed_gts": 8.0, "width": 16, "gen": 3, "gen_now": None, "width_now": None}}


# ---- classify --------------------------------------------------------------------------------


def intra(gpus, topo_name=None, nvlink=None, pcie=None) -> dict:
    return classify(gpus, topo(topo_name) if topo_name else None, nvlink, [], [], pcie=pcie)["intra"]


def test_intra_nvswitch_a100x8_and_h200x8():
    a100 = intra(gpus_of("nvidia-smi_a100-sxm4-80gb_x8.txt"), "nvidia-smi-topo_a100x8.txt")
    assert (a100["kind"], a100["gpus"], a100["generation"], a100["nv_pair_links"]) == ("nvswitch", 8, "NVLink3", 12)
    h200 = intra(gpus_of("nvidia-smi-query_h200x8.csv", parse_query_csv), "nvidia-smi-topo_h200x8.txt")
    assert (h200["kind"], h200["generation"], h200["all_pairs"]) == ("nvswitch", "NVLink4", True)
    assert "every GPU pair NV18" in h200["evidence"]


def test_intra_two_gpus_of_an_nvswitch_node_use_the_link_counts():
    nv = parse_nvlink_status(text(GPU / "nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt"))
    got = intra(gpus_of("nvidia-smi_a100-sxm4-80gb_x8.txt")[:2], "nvidia-smi-topo_a100x8.txt", nv)
    assert (got["kind"], got["links_per_gpu"], got["link_gbps"]) == ("nvswitch", 12, 25.0)
    assert "12 active links per GPU at 25 GB/s" in got["evidence"]


def test_intra_direct_meshes_are_nvlink_not_switches():
    a100x4 = intra(cc_gpus(4, "8.0"), "nvidia-smi-topo_a100x4_nv4_partial.txt")
    assert (a100x4["kind"], a100x4["generation"], a100x4["all_pairs"], a100x4["nv_pair_links"]) == (
        "nvlink", "NVLink3", True, 4)
    v100 = intra(cc_gpus(4, "7.0"), "nvidia-smi-topo_4gpu-nv2_mlx5-column.txt")
    assert (v100["kind"], v100["generation"]) == ("nvlink", "NVLink2")


def test_intra_pcie_pair_with_its_generation(fake_sys):
    gpus = gpus_of("nvidia-smi_rtx5090x2_kmd-umd-header_partial.txt")
    plain = intra(gpus, "nvidia-smi-topo_rtx5090x2_phb.txt")
    assert (plain["kind"], plain["generation"]) == ("pcie", None) and "PHB" in plain["detail"]
    # The same GPUs seen through a sysfs that gives their links (the recorded Gen3-slot tree, by bus id).
    pcie = {g["pci_bus_id"]: {"speed_gts": 8.0, "width": 16, "gen": 3} for g in gpus}
    assert intra(gpus, "nvidia-smi-topo_rtx5090x2_phb.txt", pcie=pcie)["generation"] == "PCIe Gen3 x16"


def test_intra_without_gpus_one_gpu_and_no_matrix():
    assert intra([])["kind"] == "shared-memory"
    assert intra(cc_gpus(1, "8.0"))["kind"] == "none"
    unknown = intra(cc_gpus(2, "8.0"))
    assert unknown["kind"] == "unknown" and "no matrix" in unknown["evidence"]


def inter(gpus, ib=None, net=None, ifname=None, **kw) -> dict:
    ports = parse_ibstat(text(NET / ib)) if ib else []
    return classify(gpus, None, None, ports, net or [], ifname, **kw)["inter"]


def test_inter_rdma_kinds_rates_and_ports():
    gpus = cc_gpus(8, "9.0")
    ib = inter(gpus, "ibstat_cx7-ndr400-ib_2-cas.txt")
    assert (ib["kind"], ib["rate_gbps"], ib["ports"], ib["devices"]) == ("infiniband", 400.0, 2, ["mlx5_0:1", "mlx5_1:1"])
    roce = inter(gpus, "ibstat_cx7-roce200-and-a-down-port_partial.txt")
    assert (roce["kind"], roce["rate_gbps"], roce["ports"]) == ("roce", 200.0, 2)   # the down port is not counted
    fdr = inter(gpus, "ibstat_cx3-fdr56-2port_partial.txt")
    assert (fdr["kind"], fdr["rate_gbps"], fdr["ports"]) == ("infiniband", 56.0, 1)


def test_inter_sockets_when_rdma_is_not_used(fake_sys):
    net = read_sysfs_net(str(fake_sys))
    # CPU ranks (gloo) never use RDMA; NCCL_IB_DISABLE=1 turns it off for GPUs.
    cpu = inter([], "ibstat_cx7-ndr400-ib_2-cas.txt", net)
    assert (cpu["kind"], cpu["interface"], cpu["rate_gbps"]) == ("ethernet", "ens3f0", 100.0)
    off = inter(cc_gpus(8, "9.0"), "ibstat_cx7-ndr400-ib_2-cas.txt", net, ib_disabled=True)
    assert off["kind"] == "ethernet"


def test_inter_virtual_interfaces_have_no_rate(fake_sys):
    net = read_sysfs_net(str(fake_sys))
    veth = inter([], net=net, ifname="vrefs0")
    assert (veth["kind"], veth["rate_gbps"], veth["interface"]) == ("virtual", None, "vrefs0")
    assert "nominal 10000 Mb/s is no line rate" in veth["evidence"]
    assert "bridge" in inter([], net=net, ifname="brrefs0")["detail"]
    assert "loopback" in inter([], net=net, ifname="=lo")["detail"]
    eth0 = inter([], net=net, ifname="eth")
    assert (eth0["kind"], eth0["rate_gbps"], eth0["interface"]) == ("ethernet", None, "eth0")
    assert inter([], net=net, ifname="ib")["kind"] == "unknown"
    only_virtual = [i for i in net if i["virtual"]]
    assert inter([], net=only_virtual)["interface"] == "vrefs0"   # the namespaces' case: a veth, up
    assert inter([], net=[])["kind"] == "unknown"


# ---- collect, end to end with stand-ins for the tools (no GPU or HCA exists here) ------------


CAT = shutil.which("cat")


def stand_in(bin_dir: Path, tool: str, script: str) -> None:
    path = bin_dir / tool
    path.write_text("#!/bin/sh\n" + script.replace("cat '", f"{CAT} '"))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.process
def test_collect_runs_the_tools_and_reads_sysfs(tmp_path, fake_sys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "nvidia-smi", f"""case "$1" in
  topo) cat '{GPU / "nvidia-smi-topo_a100x8.txt"}' ;;
  nvlink) cat '{GPU / "nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt"}' ;;
  *) exit 2 ;;
esac
""")
    stand_in(bin_dir, "ibstat", f"cat '{NET / 'ibstat_cx7-ndr400-ib_2-cas.txt'}'\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    got = collect(gpus_of("nvidia-smi_a100-sxm4-80gb_x8.txt")[:2], {"NCCL_SOCKET_IFNAME": "ens3"}, root=str(fake_sys))
    assert json.loads(json.dumps(got)) == got and got["errors"] == {}
    assert (got["intra"]["kind"], got["intra"]["links_per_gpu"]) == ("nvswitch", 12)
    # sysfs (RoCE at 200 and 400) is preferred to ibstat when both answer; ibstat's answer is kept in raw.
    assert (got["inter"]["kind"], got["inter"]["interface"]) == ("roce", "ens3")
    assert len(got["raw"]["ibstat"]) == 2 and len(got["raw"]["sysfs_ib"]) == 2


@pytest.mark.process
def test_collect_records_a_failing_driver_and_missing_tools(tmp_path, fake_sys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "nvidia-smi", f"cat '{GPU / 'nvidia-smi-failed_no-driver.txt'}'\nexit 9\n")
    monkeypatch.setenv("PATH", str(bin_dir))   # no ibstat either
    got = collect(cc_gpus(2, "8.0"), {}, root=str(fake_sys / "empty"))
    assert "exited 9: NVIDIA-SMI has failed" in got["errors"]["topo"]
    assert "exited 9" in got["errors"]["nvlink"] and "ibstat not installed" in got["errors"]["ibstat"]
    assert got["intra"]["kind"] == "unknown" and got["inter"]["kind"] == "unknown"


def test_collect_on_a_cpu_node_starts_no_tool(fake_sys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")   # not even ibstat: this test must start no process
    got = collect([], {"GLOO_SOCKET_IFNAME": "vrefs0"}, root=str(fake_sys))
    assert got["intra"]["kind"] == "shared-memory" and got["inter"]["kind"] == "virtual"
    assert "topo" not in got["raw"] and "ibstat" not in got["errors"]   # sysfs shows RDMA ports: nothing missing
