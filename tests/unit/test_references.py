"""Link and matmul references: the shipped file parses and cites, lookups scale by the file's rules for nodes
built from recorded probe outputs, and a bad entry is one line naming the file and the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.analysis import references
from bench.cluster.accel.nvidia.topo import parse_nvlink_status, parse_topo_matrix
from bench.cluster.interconnect import classify, parse_ibstat, read_sysfs_net
from bench.cluster.probe import node_inventory
from bench.cluster.accel.nvidia.smi import parse_nvidia_smi_table, parse_query_csv
from bench.core.errors import BadInput

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GPU, NET = FIX / "gpu", FIX / "net"
TABLE = references.load()
GB = 1e9


def node(smi_fixture: str, topo_fixture: str | None, ib_fixture: str | None = None, *, parser=parse_nvidia_smi_table,
         nvlink: str | None = None, net=(), ifname=None, pcie=None) -> dict:  # fmt: skip
    """One node's inventory as the probe would give it, from recorded outputs."""
    inv = node_inventory("n", parser((GPU / smi_fixture).read_text()))
    topo = parse_topo_matrix((GPU / topo_fixture).read_text()) if topo_fixture else None
    nv = parse_nvlink_status((GPU / nvlink).read_text()) if nvlink else None
    ports = parse_ibstat((NET / ib_fixture).read_text()) if ib_fixture else []
    inv["interconnect"] = classify(inv["gpus"], topo, nv, ports, list(net), ifname, pcie=pcie)
    return inv


H200 = node("nvidia-smi-query_h200x8.csv", "nvidia-smi-topo_h200x8.txt", "ibstat_cx7-ndr400-ib_2-cas.txt",
            parser=parse_query_csv)  # fmt: skip
A100 = node("nvidia-smi_a100-sxm4-80gb_x8.txt", "nvidia-smi-topo_a100x8.txt", "ibstat_cx7-roce200-and-a-down-port_partial.txt")


def test_shipped_sections_parse_and_cite():
    assert len(TABLE.intra) >= 3 and len(TABLE.inter) >= 3 and len(TABLE.matmul) >= 3
    for e in (*TABLE.intra, *TABLE.inter):
        assert "https://" in e.source and e.value > 0 and e.label
        assert e.derived == e.source.startswith("Derived")
    for m in TABLE.matmul:
        assert "https://" in m.source and m.upper is not None and m.upper > 0


def test_intra_published_figures_for_8_gpu_nvswitch_nodes():
    h200 = TABLE.link_for("intra", H200)
    assert (h200.kind, h200.busbw, h200.size, h200.derived) == ("nvswitch", 475 * GB, 4 * 2**30, False)
    assert "nccl-tests/issues/272" in h200.source and h200.label.startswith("NVSwitch 8x H200")
    a100 = TABLE.link_for("intra", A100)
    assert (a100.busbw, a100.lower, a100.upper) == (230 * GB, -0.25, None)


def test_intra_fewer_gpus_fall_back_to_the_per_link_rule():
    # NVLS's 475 was published for 8 GPUs; 4 GPUs of the same node get the ring's 18 links x 20.6 GB/s.
    four = TABLE.link_for("intra", H200, gpus_per_node=4)
    assert four.derived and four.busbw == pytest.approx(18 * 20.6 * GB) and "x 18 links" in four.label
    a100_two = node("nvidia-smi_a100-sxm4-80gb_x8.txt", "nvidia-smi-topo_a100x8.txt",
                    nvlink="nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt")  # fmt: skip
    ref = TABLE.link_for("intra", a100_two, gpus_per_node=2)
    assert ref.busbw == pytest.approx(12 * 20 * GB) and ref.rule == "20 GB/s per link x 12 links per GPU"


def test_intra_nothing_published_fits():
    mesh = node("nvidia-smi_a100-sxm4-80gb_x8.txt", "nvidia-smi-topo_a100x4_nv4_partial.txt")  # 4-GPU mesh + names
    mesh["gpus"] = mesh["gpus"][:4]
    mesh["interconnect"] = classify(mesh["gpus"], parse_topo_matrix((GPU / "nvidia-smi-topo_a100x4_nv4_partial.txt")
                                    .read_text()), None, [], [])  # fmt: skip
    assert TABLE.link_for("intra", mesh) is None                      # a 4-GPU direct mesh: no figure
    assert TABLE.link_for("intra", mesh, gpus_per_node=2).busbw == pytest.approx(4 * 20 * GB)  # one NV4 pair
    pcie = node("nvidia-smi_rtx5090x2_kmd-umd-header_partial.txt", "nvidia-smi-topo_rtx5090x2_phb.txt")
    assert TABLE.link_for("intra", pcie) is None                      # PCIe generation unknown
    one = node("nvidia-smi_tesla-p4.txt", None)
    assert TABLE.link_for("intra", one) is None and TABLE.link_for("inter", one) is None
    cpu = {"gpus": [], "interconnect": classify([], None, None, [], read_sysfs_net())}
    assert TABLE.link_for("intra", cpu) is None and TABLE.link_for("inter", cpu) is None
    assert TABLE.link_for("intra", {"gpus": H200["gpus"]}) is None    # an inventory from before the probe read links
    with pytest.raises(ValueError):
        TABLE.link_for("between", H200)


def test_pcie_reference_scales_with_the_slowest_link():
    gpus = node_inventory("n", parse_nvidia_smi_table((GPU / "nvidia-smi_rtx5090x2_kmd-umd-header_partial.txt")
                                                      .read_text()))["gpus"]  # fmt: skip
    pcie = {g["pci_bus_id"]: {"speed_gts": 8.0, "width": 16, "gen": 3} for g in gpus}
    inv = node("nvidia-smi_rtx5090x2_kmd-umd-header_partial.txt", "nvidia-smi-topo_rtx5090x2_phb.txt",
               "ibstat_cx7-ndr400-ib_2-cas.txt", pcie=pcie)  # fmt: skip
    intra = TABLE.link_for("intra", inv)
    assert (intra.kind, intra.busbw, intra.lower, intra.derived) == ("pcie", 12 * GB, -0.5, True)
    # Two NDR ports would carry 94 GB/s; the rings also cross the node's PCIe, 12 GB/s: the cap.
    inter = TABLE.link_for("inter", inv)
    assert inter.busbw == 12 * GB and "capped at the intra-node PCIe Gen3 x16" in inter.rule


def test_inter_per_nic_times_the_nics_the_gpus_use():
    ib = TABLE.link_for("inter", H200)
    assert (ib.kind, ib.busbw) == ("infiniband", 2 * 47 * GB)          # 2 ports recorded, 8 GPUs
    assert "nccl-tests/issues/290" in ib.source
    one_gpu = TABLE.link_for("inter", H200, gpus_per_node=1)
    assert one_gpu.busbw == 47 * GB and "min of 2 active at 400 Gb/s, 1 GPUs" in one_gpu.rule
    roce = TABLE.link_for("inter", A100)
    assert (roce.kind, roce.busbw, roce.size) == ("roce", 2 * 24 * GB, 8 * 2**30)
    slots = dict(A100, slots=[0])                                       # a job using one slot of the node
    assert TABLE.link_for("inter", slots).busbw == 24 * GB


def test_inter_ethernet_is_derived_from_the_line_rate_and_virtual_is_none(tmp_path):
    sysfs = tmp_path / "sys"
    for name, device, speed in (("ens3f0", "pci0000:80/0000:80:01.0/0000:81:00.0", "100000"),
                                ("vrefs0", "virtual", "10000")):  # fmt: skip
        d = sysfs / "devices" / device / "net" / name
        d.mkdir(parents=True)
        for key, value in (("speed", speed), ("operstate", "up"), ("type", "1")):
            (d / key).write_text(value + "\n")
        (sysfs / "class" / "net").mkdir(parents=True, exist_ok=True)
        (sysfs / "class" / "net" / name).symlink_to(Path("../../devices") / device / "net" / name)
    net = read_sysfs_net(str(sysfs))
    tcp = node("nvidia-smi_t4x5.txt", None, net=net, ifname="ens3f0")
    ref = TABLE.link_for("inter", tcp)
    assert (ref.kind, ref.busbw, ref.lower, ref.derived) == ("ethernet", 12.5 * GB, -0.6, True)
    veth = node("nvidia-smi_t4x5.txt", None, net=net, ifname="vrefs0")
    assert veth["interconnect"]["inter"]["kind"] == "virtual" and TABLE.link_for("inter", veth) is None
    fdr = node("nvidia-smi_t4x5.txt", None, "ibstat_cx3-fdr56-2port_partial.txt")
    assert fdr["interconnect"]["inter"]["rate_gbps"] == 56 and TABLE.link_for("inter", fdr) is None


def test_matmul_lookups():
    h100 = TABLE.matmul_for("NVIDIA H100 80GB HBM3", "bf16")
    assert h100.flops == 794.5e12 and h100.upper == pytest.approx(989 / 794.5 - 1, abs=1e-3)
    assert TABLE.matmul_for("NVIDIA H200", "bf16").flops == 794.5e12
    assert TABLE.matmul_for("NVIDIA A100-SXM4-40GB", "bf16").flops == 271.2e12
    assert TABLE.matmul_for("NVIDIA A100 80GB PCIe", "bf16").flops == 252.9e12
    assert TABLE.matmul_for("NVIDIA H100 SXM5 80GB", "bf16") == h100  # the table's alias of the same GPU
    assert TABLE.matmul_for("Tesla T4", "bf16") is None and TABLE.matmul_for("NVIDIA H200", "fp16") is None


def test_throughput_references_still_answer():
    rtx = TABLE.throughput_for("NVIDIA GeForce RTX 3090", "fp16", "vit-b16-224", 192)
    assert rtx.value == 390.86 and "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv" in rtx.source
    assert TABLE.throughput_for("NVIDIA GeForce RTX 3090", "fp16", "vit-h14-224", 16).value == 39.94
    assert TABLE.throughput_for("Tesla T4", "fp32", "vit-b16-224", 64) is not None


GOOD_INTRA = {"kind": "nvswitch", "gpu": "NVIDIA H200", "gpus": 8, "busbw_bytes_per_s": 475e9, "label": "x", "source": "y"}
GOOD_INTER = {"kind": "infiniband", "rate_gbps": 400, "per_nic_bytes_per_s": 47e9, "label": "x", "source": "y"}


@pytest.mark.parametrize("section, entry, needle", [
    ("intra_node_busbw", {**GOOD_INTRA, "kind": "nvlinks"}, "intra_node_busbw[0].kind: 'nvlinks' is not one of"),
    ("intra_node_busbw", {**GOOD_INTRA, "per_link_bytes_per_s": 1e9}, "needs exactly one of"),
    ("intra_node_busbw", {**GOOD_INTRA, "busbw_bytes_per_s": -1}, "busbw_bytes_per_s: must be a positive number"),
    ("intra_node_busbw", {**GOOD_INTRA, "gpus": 1}, "intra_node_busbw[0].gpus: must be a GPU count >= 2"),
    ("intra_node_busbw", {**GOOD_INTRA, "gpu": []}, "intra_node_busbw[0].gpu: must be a name or a non-empty list"),
    ("intra_node_busbw", {k: v for k, v in GOOD_INTRA.items() if k != "source"}, "source must be a non-empty string"),
    ("intra_node_busbw", {"kind": "nvlink", "per_link_bytes_per_s": 2e10, "label": "x", "source": "y"},
     "per_link_bytes_per_s needs cc"),
    ("inter_node_busbw", {**GOOD_INTER, "kind": ["roce", "pcie"]}, "inter_node_busbw[0].kind: 'pcie' is not one of"),
    ("inter_node_busbw", {**GOOD_INTER, "rate_gbps": None}, "per_nic_bytes_per_s needs rate_gbps"),
    ("inter_node_busbw", {**GOOD_INTER, "lower": "a lot"}, "inter_node_busbw[0].lower: must be a number or null"),
    ("inter_node_busbw", {**GOOD_INTER, "size_bytes": 1.5}, "size_bytes: must be a positive integer"),
    ("matmul", {"gpu": "NVIDIA H200", "dtype": "bf16", "tflops": 0, "source": "y"}, "matmul[0].tflops: must be a positive"),
    ("matmul", {"gpu": "NVIDIA H200", "tflops": 1, "source": "y"}, "matmul[0]: dtype must be a non-empty string"),
])  # fmt: skip
def test_a_bad_entry_is_one_line_naming_the_file_and_the_entry(tmp_path, section, entry, needle):
    path = tmp_path / "refs.json"
    path.write_text(json.dumps({section: [entry]}))
    with pytest.raises(BadInput) as e:
        references.load(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}: {section}[0]") and needle in message and "\n" not in message


def test_a_file_with_only_the_old_sections_still_loads(tmp_path):
    path = tmp_path / "refs.json"
    path.write_text(json.dumps({"throughput": []}))
    table = references.load(str(path))
    assert table.link_for("intra", H200) is None and table.matmul_for("NVIDIA H200", "bf16") is None
