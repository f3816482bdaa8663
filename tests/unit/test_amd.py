"""The AMD Instinct backend on recorded amd-smi and rocm-smi outputs (tests/fixtures/amd, sources in SOURCES.md):
`bench validate --health-from` reads the recorded GPUs and their counters, a recorded ECC/RAS error is a finding;
the inventory's fields; the backend's visible-devices variable; the peaks and their sources.

Real captures: both rocm-smi JSON files (telegraf's testdata, 4x and 6x MI100) and the MI300X `amd-smi metric -k`
pastes with their UMC correctable 2 and SDMA uncorrectable 1 (device-metrics-exporter PR #368); the MI350X
`amd-smi static` is a real capture cut by the store; the rest are AMD's own example outputs (ROCm/amdsmi's README
and CHANGELOG), which is what their test says. No recording of a down xGMI link, an active throttle or a
narrowed PCIe link exists: those rules are tested on the recorded tables with one value changed, said there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bench.cluster import accel
from bench.cluster.accel.amd import health, links, readings, rocm_smi
from bench.cluster.accel.amd.specs import lookup
from bench.cluster.health.report import Report
from tests.conftest import cli

AMD = Path(__file__).resolve().parents[1] / "fixtures" / "amd"

# (recording, saved as, exit status, verdict, GPUs read, findings (code, severity, action, GPU)).
RECORDED = [
    ("amd-smi-metric-k_mi300x-oam_sdma-uncorrectable-1_with-gpuctl-and-exporter.txt", "amd-smi-metric.txt", 1,
     "drain", 1, [("amd-ecc-uncorrectable", "fail", "reset-gpu", 0)]),
    ("amd-smi-metric-k_mi300x-oam_umc-correctable-2_with-gpuctl-and-exporter.txt", "amd-smi-metric.txt", 0,
     "degraded", 1, [("amd-ecc-correctable", "warn", "watch", 0)]),
    ("amd-smi-metric-ecc-block_gpu0_all-zero.txt", "amd-smi-metric.txt", 0, "healthy", 1, []),
    ("amd-smi-metric-pcie_mi300-class_gpu0-1_excerpt.txt", "amd-smi-metric.txt", 0, "healthy", 2, []),
    ("amd-smi-metric-throttle_mi300-class_gpu0-1_excerpt.txt", "amd-smi-metric.txt", 0, "healthy", 2, []),
    ("amd-smi-static_mi300a-x4-apu_4cpu_driver6.9.0-rc5.txt", "amd-smi-static.txt", 0, "healthy", 4, []),
    ("amd-smi-static_mi350x_gpu0_partial.txt", "amd-smi-static.txt", 0, "healthy", 1, []),
    ("amd-smi-topology_8gpu-mi300-class_all-xgmi.txt", "amd-smi-topology.txt", 0, "healthy", 0, []),
    ("amd-smi-xgmi_8gpu-mi300-class_link-metric-table.txt", "amd-smi-xgmi.txt", 0, "healthy", 0, []),
    ("rocm-smi-json_mi100-x4_rocm6.0.2.json", "rocm-smi.json", 0, "healthy", 4, []),
    ("rocm-smi-json_mi100-x6_rocm5.7.1.json", "rocm-smi.json", 0, "healthy", 6, []),
]


def _node(tmp_path: Path, files: dict[str, str]) -> Path:
    node = tmp_path / "mi300x-node"
    node.mkdir()
    for name, text in files.items():
        (node / name).write_text(text)
    return node


@pytest.mark.parametrize("recording,name,status,verdict,n,found", RECORDED, ids=[r[0] for r in RECORDED])
def test_health_from_each_recorded_amd_output(tmp_path, recording, name, status, verdict, n, found):
    node = tmp_path / "mi300x-node"
    node.mkdir()
    shutil.copyfile(AMD / recording, node / name)
    got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "out"), "--json")
    assert got.returncode == status, got.stderr
    rec = json.loads(got.stdout)
    assert rec["nodes"]["mi300x-node"]["verdict"] == verdict
    report = rec["measured"]["health"]["mi300x-node"]
    assert len(report["gpus"]) == n and "amd" in report["read"]
    assert [(f["code"], f["severity"], f["action"], f["gpu_index"]) for f in report["findings"]] == found
    if found:
        row = next(c for c in rec["checks"] if c["check"] == "health" and c["status"] != "PASS")
        assert row["node"] == "mi300x-node:0" and found[0][0] in row["value"]


def test_the_recorded_counters_and_inventory_are_read():
    (sdma,) = readings.from_amd_smi((AMD / RECORDED[0][0]).read_text())
    assert sdma.ecc == {"SDMA": {"correctable": 0, "uncorrectable": 1, "deferred": 0}}   # gpuctl's line not read
    (mi350,) = readings.from_amd_smi((AMD / "amd-smi-static_mi350x_gpu0_partial.txt").read_text())
    assert mi350.inventory() | {"firmware": None} == {
        "index": 0, "name": "AMD Instinct MI350X", "memory_mib": None, "bus_id": "0000:05:00.0",
        "compute_capability": None, "gfx": "gfx950", "vendor": "amd", "driver_version": "6.18.3", "firmware": None,
        "compute_units": 128, "pcie_width_max": 16, "pcie_speed_gts_max": 32.0, "partition": None}
    assert mi350.firmware == {"ifwi": "00154951 (113-M350-01-1K0-920A)"}
    apu = readings.from_amd_smi((AMD / "amd-smi-static_mi300a-x4-apu_4cpu_driver6.9.0-rc5.txt").read_text())
    assert [(g.bus_id, g.name, g.memory_mib, g.partition) for g in apu] == [
        (f"000{i}:01:00.0", "MI300A", 64289, "SPX") for i in range(4)]          # its 4 CPU blocks are no GPUs
    assert apu[0].ecc_enabled["UMC"] is False and apu[0].ecc_enabled["GFX"] is True
    cards, system = rocm_smi.parse((AMD / "rocm-smi-json_mi100-x4_rocm6.0.2.json").read_text())
    assert [(g.bus_id, g.memory_mib, g.pcie_width) for g in cards] == [
        ("0000:83:00.0", 32752, 16), ("0000:a3:00.0", 32752, 16), ("0000:c3:00.0", 32752, 16),
        ("0000:e3:00.0", 32752, 16)]   # rocm-smi's "0000:A3:00.0" in sysfs's spelling
    assert cards[0].name == "Arcturus GL-XL [Instinct MI100]" and cards[0].firmware["TA XGMI"] == "32.00.00.17"
    assert cards[0].firmware["vbios"] == "113-D3431401-101" and system["driver_version"] == "6.3.6"
    assert set(system["links"].values()) == {"PCIE"} and links.not_xgmi(system["links"]) == []   # no bridge
    pcie = readings.from_amd_smi((AMD / "amd-smi-metric-pcie_mi300-class_gpu0-1_excerpt.txt").read_text())
    assert pcie[1].pcie_errors["replay_count"] == 0 and (pcie[1].pcie_width, pcie[1].pcie_speed_gts) == (16, 32.0)


def test_a_down_xgmi_link_an_active_throttle_and_a_narrow_link_are_findings():
    # Not recorded: the recorded tables with one value changed each.
    topo = (AMD / "amd-smi-topology_8gpu-mi300-class_all-xgmi.txt").read_text()
    pairs = links.link_types(topo)
    assert len(pairs) == 56 and set(pairs.values()) == {"XGMI"}
    head, _, tail = topo.partition("LINK TYPE TABLE:")
    rows = tail.split("\n")
    rows[2] = rows[2].replace("SELF         XGMI", "SELF         PCIE", 1)   # 0c -> 22 over PCIe
    r = Report("n", None)
    health.read_texts(r, {"amd-smi-topology.txt": head + "LINK TYPE TABLE:" + "\n".join(rows)})
    (down,) = r.done()["findings"]
    assert down["code"] == "amd-xgmi-link-down" and "0000:0c:00.0 and 0000:22:00.0" in down["what"]
    throttle = (AMD / "amd-smi-metric-throttle_mi300-class_gpu0-1_excerpt.txt").read_text()
    hot = throttle.replace("HBM_THERMAL_VIOLATION_STATUS: NOT ACTIVE", "HBM_THERMAL_VIOLATION_STATUS: ACTIVE", 1)
    narrow = (AMD / "amd-smi-metric-pcie_mi300-class_gpu0-1_excerpt.txt").read_text().replace("WIDTH: 16", "WIDTH: 8", 1)
    static = (AMD / "amd-smi-static_mi350x_gpu0_partial.txt").read_text()
    got = health.findings(readings.merge(readings.from_amd_smi(static), readings.from_amd_smi(narrow),
                                         readings.from_amd_smi(hot)))  # fmt: skip
    assert [(f["code"], f["gpu_index"]) for f in got] == [("amd-throttle-active", 0), ("pcie-width-degraded", 0)]
    assert "HBM_THERMAL" in got[0]["what"] and "x8 of x16" in got[1]["what"]


def test_a_file_that_is_not_what_its_name_says_is_refused_in_one_line(tmp_path):
    node = _node(tmp_path, {"rocm-smi.json": "GPU[0] : pcie_bandwidth_acc (GB/s): 7832224487406\n"})
    got = cli("validate", "--health-from", str(node), "--out", str(tmp_path / "out"))
    assert got.returncode == 2 and "rocm-smi.json: not rocm-smi's JSON" in got.stderr and "Traceback" not in got.stderr


def test_the_backend_its_visible_devices_variable_and_what_it_claims():
    amd = accel.backend("amd")
    assert amd.visible_devices_env == "ROCR_VISIBLE_DEVICES" and amd.collective_backend == "nccl"
    assert set(amd.saved_files) == set(health.SAVED) and amd.sampler(1.0).name == "bench-burn-amdsmi"
    mi350 = readings.from_amd_smi((AMD / "amd-smi-static_mi350x_gpu0_partial.txt").read_text())
    probe = {"gpus": [g.inventory() for g in mi350], "source": "amd-smi"}
    assert accel.detect(probe).name == "amd"
    assert accel.detect({"gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "source": "nvml"}).name == "nvidia"
    from bench.cluster.accel.amd import visible
    assert visible({"HIP_VISIBLE_DEVICES": "2,3"}) == "2,3" and visible({"ROCR_VISIBLE_DEVICES": "1"}) == "1"


@pytest.mark.process
def test_detect_through_a_stand_in_amd_smi_replaying_a_recorded_list(tmp_path, monkeypatch):
    tool = tmp_path / "amd-smi"
    tool.write_text(f"#!/bin/sh\ncat {AMD / 'amd-smi-list_2gpu_kfd-id_uuid-redacted.txt'}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    d = accel.backend("amd").detect()
    assert (d.found, d.count, d.tool, d.failed) == (True, 2, "amd-smi list", False)


def test_peaks_for_the_four_instinct_models_with_their_sources():
    want = {"AMD Instinct MI300X OAM": (1307.4, 192), "Aldebaran/MI200 [Instinct MI250X/MI250]": (191.5, 64),
            "AMD Instinct MI325X": (1307.4, 256), "AMD Instinct MI355X": (2516.6, 288)}
    for name, (bf16, gb) in want.items():
        spec = accel.backend("amd").peak(name)
        assert (spec.bf16_tflops, spec.memory_gb) == (bf16, gb) and "https://www.amd.com/" in spec.source, name
    assert lookup("Arcturus GL-XL [Instinct MI100]") is None and lookup("AMD Instinct MI350X") is None


def test_the_hetero_verdict_refuses_one_run_across_vendors_and_names_the_mix():
    from bench.cluster.hetero import verdict

    mi350 = [g.inventory() for g in readings.from_amd_smi((AMD / "amd-smi-static_mi350x_gpu0_partial.txt").read_text())]
    # An H100 node as the NVIDIA backend's inventory gives it (name as tests/fixtures/health's H100 -q prints it).
    h100 = {"host": "h100", "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}]}
    v = verdict([h100, {"host": "mi350", "gpus": mi350}, {"host": "mi350b", "gpus": mi350}])
    (mixed,) = [f for f in v["findings"] if f["code"] == "vendor-mixed"]
    assert v["level"] == "fail" and mixed["level"] == "fail" and mixed["hosts"] == ["h100", "mi350", "mi350b"]
    assert "NVIDIA on h100; AMD on mi350, mi350b" in mixed["message"] and "RCCL" in mixed["message"]
    assert not [f for f in verdict([{"host": "a", "gpus": mi350}, {"host": "b", "gpus": mi350}])["findings"]
                if f["code"] == "vendor-mixed"]


@pytest.mark.process
def test_a_stand_in_amd_smi_makes_this_nodes_inventory_amd_and_the_verdict_names_the_mix(tmp_path, monkeypatch):
    """The probe's own inventory on a node whose amd-smi replays the recorded `list` and MI350X `static`."""
    from bench.cluster import probe
    from bench.cluster.hetero import verdict

    tool = tmp_path / "amd-smi"
    tool.write_text(f"#!/bin/sh\ncase \"$1\" in\n  list) cat {AMD / 'amd-smi-list_2gpu_kfd-id_uuid-redacted.txt'} ;;\n"
                    f"  static) cat {AMD / 'amd-smi-static_mi350x_gpu0_partial.txt'} ;;\n  *) exit 2 ;;\nesac\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    inv = probe.local_inventory(with_torch=False)
    assert [(g["name"], g["gfx"], g["vendor"], g["bus_id"]) for g in inv["gpus"]] == [
        ("AMD Instinct MI350X", "gfx950", "amd", "0000:05:00.0")]
    assert inv["gpu_source"] == "amd-smi" and inv["driver_version"] == "6.18.3" and accel.detect(inv).name == "amd"
    h100 = {"host": "h100", "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}]}
    codes = {f["code"] for f in verdict([h100, dict(inv, host="mi350")])["findings"]}
    assert {"vendor-mixed", "gpu-model-mixed"} <= codes


def test_a_launch_on_amd_nodes_names_their_backend_and_its_ranks_get_its_variable(tmp_path):
    """The verdict over AMD nodes names the AMD backend; a GPU launch on them passes it to each node's launcher
    (--accel amd: ROCR_VISIBLE_DEVICES, tests/unit/test_node_launcher.py runs it), records it in plan.json,
    gives Apptainer --rocm and sets no other vendor's device-order variable. CPU ranks name none. MI350X: the
    real `amd-smi static` capture (partial)."""
    from bench.cluster.container import ContainerExec
    from bench.cluster.hetero import verdict
    from bench.core.accel_names import ranks_visible_env, vendor
    from bench.jobs.gate import accel_of
    from bench.launch.plan import build, plan_json

    mi350 = [g.inventory() for g in readings.from_amd_smi((AMD / "amd-smi-static_mi350x_gpu0_partial.txt").read_text())]
    v = verdict([{"host": "a", "gpus": mi350}, {"host": "b", "gpus": mi350}])
    h100 = {"host": "h", "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}]}
    assert (v["accel"], verdict([h100])["accel"], verdict([{"host": "c", "gpus": []}])["accel"]) == (
        "amd", "nvidia", "cpu")
    assert accel_of("cuda", v) == "amd" and accel_of("cpu", v) is None
    assert ranks_visible_env("amd") == "ROCR_VISIBLE_DEVICES" != ranks_visible_env(None) == ranks_visible_env("cpu")
    lp = build({"localhost": [0, 1]}, "local", str(tmp_path / "run"), "cuda", accel=accel_of("cuda", v),
               environ={"PATH": "/usr/bin:/bin", "HIP_VISIBLE_DEVICES": "3"})
    assert "--accel=amd" in lp.argv and plan_json(lp, {"localhost": [0, 1]}, "cuda", 60)["accel"] == "amd"
    assert "HIP_VISIBLE_DEVICES" not in lp.env
    assert not set(vendor("nvidia")["device_order_env"]) & set(lp.env)
    cpu = build({"localhost": [0, 1]}, "local", str(tmp_path / "cpu"), "cpu", accel="amd", environ={"PATH": "/bin"})
    assert not [a for a in cpu.argv if a.startswith("--accel")] and cpu.accel is None
    ce = ContainerExec(argv=("apptainer", "exec", "img.sif"), python="python3", source="test", in_container=False)
    assert ce.with_devices("cuda", "amd").argv == ("apptainer", "exec", "--rocm", "img.sif")


def test_mfu_and_the_verdict_find_an_instinct_peak_where_they_find_an_h100s():
    """bench.core.gpus.lookup asks AMD's table after NVIDIA's: the name torch gives a ROCm rank's device gets its
    peak (MFU), and the verdict's straggler figures see it; a model the table lacks is named with AMD's table."""
    from bench.analysis.figures import peak_flops_of
    from bench.cluster.hetero import verdict
    from bench.core.gpus import lookup as core_lookup

    assert peak_flops_of("AMD Instinct MI300X", "bf16") == (1307.4e12, None)
    assert peak_flops_of("AMD Instinct MI355X OAM", "fp32") == (157.3e12, None)
    assert core_lookup("AMD Instinct MI325X").name == "AMD Instinct MI325X" and core_lookup("MI300A") is None
    assert core_lookup("NVIDIA H100 80GB HBM3").arch != "CDNA3"   # NVIDIA's table first
    mi300x = {"host": "a", "gpus": [{"index": 0, "name": "AMD Instinct MI300X OAM", "vendor": "amd"}]}
    mi355x = {"host": "b", "gpus": [{"index": 0, "name": "AMD Instinct MI355X", "vendor": "amd"}]}
    v = verdict([mi300x, mi355x], precision="bf16")
    assert (v["slowest"]["model"], v["fastest"]["model"], v["ratio"]) == ("AMD Instinct MI300X", "AMD Instinct MI355X",
                                                                          1.92)
    mi300a = [g.inventory() for g in readings.from_amd_smi(
        (AMD / "amd-smi-static_mi300a-x4-apu_4cpu_driver6.9.0-rc5.txt").read_text())]
    unknown = [f for f in verdict([{"host": "c", "gpus": mi300a}])["findings"] if f["code"] == "gpu-unknown"]
    assert unknown and "add it to bench/data/amd_gpu_specs.json" in unknown[0]["message"]


def test_the_burn_takes_the_plans_backends_sampler_and_amds_says_no_amdsmi_where_there_is_none():
    """bench.worker.burn.sampler_for: a plan naming amd gets the amdsmi sampler, one naming none or nvidia the
    NVML one (as before). amdsmi is not installed here (no ROCm): the AMD sampler opens nothing and says so, in the
    record keys the burn's judge reads, and its columns are the NVIDIA sampler's."""
    from bench.cluster.accel.amd.sampler import FIELDS as AMD_FIELDS, Sampler as AmdSampler
    from bench.cluster.accel.nvidia.sampler import FIELDS, Sampler
    from bench.worker.burn import _said, sampler_for

    assert type(sampler_for({"accel": "amd"}, 1.0)) is AmdSampler and AMD_FIELDS == FIELDS
    assert type(sampler_for({"accel": "nvidia"}, 1.0)) is Sampler and type(sampler_for({}, 1.0)) is Sampler
    s = sampler_for({"accel": "amd"}, 0.01)
    try:
        import amdsmi  # noqa: F401
        pytest.skip("amdsmi is installed here: the absent path cannot be shown")
    except ImportError:
        pass
    assert s.open() is False and s.error.startswith("no amdsmi here: ModuleNotFoundError"), s.error
    part = s.stop()
    assert part["nvml"] is None and part["nvml_error"] == s.error and _said(part) == s.error


def test_an_instinct_gpu_trains_in_the_precisions_its_table_entry_has_a_peak_for():
    """On the recorded MI350X (gfx950, the real capture) the verdict refused bf16
    as 'needs sm_80+' (AMD has no compute capability). A gfx target now supports what amd_gpu_specs.json gives its
    model a peak for (gfx950: the MI355X's fp16/bf16); a target the table lacks (MI100's gfx908) fp32 alone."""
    from bench.cluster.hetero import verdict
    from bench.core.gpus import supports

    assert supports("gfx942", "bf16") and supports("gfx950", "fp16") and supports("gfx90a", "bf16")
    assert supports("gfx908", "fp32") and not supports("gfx908", "bf16")
    mi350 = [g.inventory() for g in readings.from_amd_smi((AMD / "amd-smi-static_mi350x_gpu0_partial.txt").read_text())]
    v = verdict([{"host": "a", "gpus": mi350}], precision="bf16")
    assert not [f for f in v["findings"] if f["code"].startswith("precision-")] and "bf16" in v["precisions"], v


def test_validates_comm_and_numerics_launches_name_the_nodes_backend_too():
    """bench validate's own launches (bench.validate.runs: comm, numerics) name the verdict's backend, as its
    training launches do (bench.jobs.train), so their ranks on AMD nodes get ROCR_VISIBLE_DEVICES as well."""
    from types import SimpleNamespace

    from bench.validate import runs

    assert runs._accel(SimpleNamespace(device="cuda", figures={"verdict": {"accel": "amd"}})) == "amd"
    assert runs._accel(SimpleNamespace(device="cpu", figures={"verdict": {"accel": "amd"}})) is None
