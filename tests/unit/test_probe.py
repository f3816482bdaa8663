"""The node probe: parsers on recorded nvidia-smi/torch outputs, and the real probe of this machine."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli

from bench.cluster.hetero import verdict
from bench.cluster.probe import (
    complete_gpus,
    find_arch_lists,
    local_inventory,
    node_inventory,
    parse_nvidia_smi_q,
    parse_nvidia_smi_table,
    parse_query_csv,
    smi_failure,
    torch_built_for,
)
from bench.commands.probe import selected

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
ROOT = Path(__file__).resolve().parents[2]
FAILURES = ["nvidia-smi-failed_no-driver.txt", "nvidia-smi-failed_nvml-version-mismatch.txt"]
PARSERS = [parse_nvidia_smi_table, parse_nvidia_smi_q, parse_query_csv]


def text(name: str) -> str:
    return (FIX / name).read_text()


def arch_list_2_14() -> list[str]:
    (found,) = find_arch_lists(text("torch-arch-list_pt2.14.1-cu130.txt"))
    return found


# ---- plain nvidia-smi ------------------------------------------------------------------------


def test_table_t4x5():
    r = parse_nvidia_smi_table(text("nvidia-smi_t4x5.txt"))
    assert (r["driver_version"], r["cuda_version"], r["error"]) == ("515.43.04", "11.7", None)
    assert [g["index"] for g in r["gpus"]] == [0, 1, 2, 3, 4]
    assert {g["name"] for g in r["gpus"]} == {"Tesla T4"}
    assert {g["memory_mib"] for g in r["gpus"]} == {15360}
    assert [g["pci_bus_id"][9:11] for g in r["gpus"]] == ["06", "2F", "30", "86", "AF"]


def test_table_a100_ignores_the_process_table():
    r = parse_nvidia_smi_table(text("nvidia-smi_a100-sxm4-80gb_x8.txt"))
    assert len(r["gpus"]) == 8  # ten process rows below must not count
    assert {g["name"] for g in r["gpus"]} == {"NVIDIA A100-SXM..."}
    assert {g["memory_mib"] for g in r["gpus"]} == {81920}
    assert r["gpus"][7]["pci_bus_id"] == "00000000:CB:00.0"
    assert all(g["cc"] is None for g in r["gpus"])  # the table has none; the spec table fills it


@pytest.mark.parametrize(
    ("name", "model", "memory", "driver"),
    [("nvidia-smi_tesla-p4.txt", "Tesla P4", 7611, "390.30"),
     ("nvidia-smi_gtx1070.txt", "GeForce GTX 1070", 8114, "396.24")],
)  # fmt: skip
def test_table_old_header_without_cuda(name, model, memory, driver):
    r = parse_nvidia_smi_table(text(name))
    assert (r["driver_version"], r["cuda_version"]) == (driver, None)
    (g,) = r["gpus"]
    assert (g["name"], g["memory_mib"]) == (model, memory)


def test_table_new_kmd_umd_header():
    r = parse_nvidia_smi_table(text("nvidia-smi_rtx5090x2_kmd-umd-header_partial.txt"))
    assert (r["driver_version"], r["cuda_version"]) == ("610.57.04", "13.3")
    assert [g["name"] for g in r["gpus"]] == ["NVIDIA GeForce RTX 5090"] * 2


def test_table_mixed_partial_and_plus_border():
    r = parse_nvidia_smi_table(text("nvidia-smi_mixed_rtx5090-rtx3090ti_partial.txt"))
    assert (r["driver_version"], r["cuda_version"]) == ("595.71.05", "13.2")
    assert [(g["name"], g["memory_mib"]) for g in r["gpus"]] == [
        ("NVIDIA GeForce RTX 5090", 32607), ("NVIDIA GeForce RTX 3090 Ti", 24564)]  # fmt: skip


def test_table_truncated_name_stays_as_printed():
    (g,) = parse_nvidia_smi_table(text("nvidia-smi_rtx3070_name-truncated.txt"))["gpus"]
    assert (g["name"], g["memory_mib"], g["pci_bus_id"]) == ("NVIDIA GeForce ...", 7979, "00000000:41:00.0")
    (done,) = complete_gpus([g], arch_list_2_14())
    assert done["model"] is None and done["cc"] is None and done["torch_built_for"] is None


def test_table_rejects_other_text():
    r = parse_nvidia_smi_table(text("nvidia-smi-topo_h200x8.txt"))
    assert r["gpus"] == [] and "not nvidia-smi output" in r["error"]


# ---- nvidia-smi -q ---------------------------------------------------------------------------


def test_q_full_a100():
    r = parse_nvidia_smi_q(text("nvidia-smi-q_a100-sxm4-80gb_x8.txt"))
    assert (r["driver_version"], r["cuda_version"], r["error"]) == ("525.60.13", "12.0", None)
    assert len(r["gpus"]) == 8
    assert {g["name"] for g in r["gpus"]} == {"NVIDIA A100-SXM4-80GB"}
    # FB memory, not the BAR1 aperture (131072 MiB) that follows it.
    assert {g["memory_mib"] for g in r["gpus"]} == {81920}
    assert len({g["pci_bus_id"] for g in r["gpus"]}) == 8
    # The same node's default table lists the same buses in the same order.
    table = parse_nvidia_smi_table(text("nvidia-smi_a100-sxm4-80gb_x8.txt"))
    assert [g["pci_bus_id"] for g in r["gpus"]] == [g["pci_bus_id"] for g in table["gpus"]]


@pytest.mark.parametrize(
    ("name", "model", "bus", "driver"),
    [("nvidia-smi-q_t4_excerpt.txt", "Tesla T4", "00000000:00:1E.0", "525.89.02"),
     ("nvidia-smi-q_rtx3070_excerpt.txt", "NVIDIA GeForce RTX 3070", "00000000:01:00.0", "470.86")],
)  # fmt: skip
def test_q_excerpts(name, model, bus, driver):
    r = parse_nvidia_smi_q(text(name))
    (g,) = r["gpus"]
    assert (g["name"], g["pci_bus_id"], g["memory_mib"], r["driver_version"]) == (model, bus, None, driver)


# ---- --query-gpu CSV -------------------------------------------------------------------------


def test_csv_h200_header_with_units():
    r = parse_query_csv(text("nvidia-smi-query_h200x8.csv"))
    assert r["driver_version"] == "570.211.01" and r["error"] is None
    assert [g["index"] for g in r["gpus"]] == list(range(8))
    assert {(g["name"], g["memory_mib"]) for g in r["gpus"]} == {("NVIDIA H200", 143771)}
    assert all(g["cc"] is None and g["pci_bus_id"] is None for g in r["gpus"])


def test_csv_noheader_reads_the_given_fields():
    # The recorded rows as --format=csv,noheader prints them: the header line dropped.
    rows = text("nvidia-smi-query_h200x8.csv").splitlines()[1:]
    fields = ("index", "name", "memory.total", "driver_version", "power.limit", "pstate")
    r = parse_query_csv("\n".join(rows), fields)
    assert len(r["gpus"]) == 8 and r["gpus"][3]["index"] == 3 and r["gpus"][3]["memory_mib"] == 143771
    assert r["driver_version"] == "570.211.01"


def test_csv_without_index_numbers_rows():
    (g,) = parse_query_csv(text("nvidia-smi-query_h100_name-busid-vbios_first-row.csv"))["gpus"]
    assert (g["index"], g["name"], g["pci_bus_id"]) == (0, "NVIDIA H100 80GB HBM3", "00000000:04:00.0")


def test_csv_na_values_are_none():
    r = parse_query_csv(text("nvidia-smi-query_a100-sxm4-80gb_x8_power-util.csv"))
    assert len(r["gpus"]) == 8 and all(g["name"] is None for g in r["gpus"])


# ---- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("name", FAILURES)
def test_failure_outputs_give_no_gpus_and_the_message(parser, name):
    r = parser(text(name))
    assert r["gpus"] == []
    assert r["error"] == smi_failure(text(name))


def test_failure_messages():
    assert "couldn't communicate with the NVIDIA driver" in smi_failure(text(FAILURES[0]))
    assert smi_failure(text(FAILURES[1])) == (
        "Failed to initialize NVML: Driver/library version mismatch; NVML library version: 570.124")
    assert smi_failure(text("nvidia-smi_t4x5.txt")) is None


# ---- torch arch lists ------------------------------------------------------------------------


def test_find_arch_lists_in_fixtures():
    assert arch_list_2_14() == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert len(find_arch_lists(text("torch-arch-list_pt2.10-2.11_cu126-cu128.txt"))) == 3
    assert find_arch_lists(text("torch-arch-error_gtx1070ti_sm61.txt")) == [["sm_50", "sm_70", "sm_80", "sm_86"]]


@pytest.mark.parametrize(
    ("fixture", "which", "cc", "built"),
    [
        # torch's own verdicts recorded in the fixtures: our rule must agree with them.
        ("torch-arch-error_gtx1070ti_sm61.txt", 0, "6.1", False),
        ("torch-arch-error_rtx3070_sm86_pt1.7.1.txt", 0, "8.6", False),
        ("torch-capability-and-arch-list_sm80_pt1.12.1-cu116.txt", 0, "8.0", True),
        # Pascal is gone from recent wheels; Ampere, Hopper and Blackwell are there.
        ("torch-arch-list_pt2.14.1-cu130.txt", 0, "6.1", False),
        ("torch-arch-list_pt2.14.1-cu130.txt", 0, "7.0", False),
        ("torch-arch-list_pt2.14.1-cu130.txt", 0, "7.5", True),
        ("torch-arch-list_pt2.14.1-cu130.txt", 0, "8.9", True),  # sm_86 cubin runs on 8.9
        ("torch-arch-list_pt2.14.1-cu130.txt", 0, "12.0", True),
        ("torch-arch-list_pt2.10-2.11_cu126-cu128.txt", 0, "6.1", True),  # cu126 still has sm_60
        ("torch-arch-list_pt2.10-2.11_cu126-cu128.txt", 0, "12.0", False),
        ("torch-arch-list_pt2.10-2.11_cu126-cu128.txt", 1, "7.0", False),
    ],
)  # fmt: skip
def test_torch_built_for_fixture_lists(fixture, which, cc, built):
    assert torch_built_for(cc, find_arch_lists(text(fixture))[which]) is built


@pytest.mark.parametrize(
    ("cc", "arch", "built"),
    [
        ("6.1", ["sm_60"], True), ("6.0", ["sm_61"], False), ("9.0", ["sm_80"], False),
        ("9.0", ["sm_80", "compute_80"], True), ("8.0", ["compute_86"], False),
        ("9.0", ["sm_90a"], True), ("10.0", ["sm_90a"], False), ("10.3", ["sm_100f"], True),
        ("12.0", ["sm_100f"], False), ("8.6", ["bogus", "sm_86"], True), ("x", ["sm_86"], False),
    ],
)  # fmt: skip
def test_torch_built_for_rules(cc, arch, built):
    assert torch_built_for(cc, arch) is built


# ---- inventories -----------------------------------------------------------------------------


def test_node_inventory_from_fixture_is_json_and_complete():
    smi = parse_nvidia_smi_table(text("nvidia-smi_tesla-p4.txt"))
    inv = node_inventory("tesla-node5", smi, torch_info={"version": "2.14.1+cu130", "arch_list": arch_list_2_14()})
    assert json.loads(json.dumps(inv)) == inv
    (g,) = inv["gpus"]
    assert (g["model"], g["cc"], g["cc_source"], g["torch_built_for"]) == ("Tesla P4", "6.1", "table", False)
    assert inv["driver_version"] == "390.30" and inv["gpu_error"] is None


def test_node_inventory_of_a_failed_driver():
    inv = node_inventory("n1", parse_nvidia_smi_table(text(FAILURES[1])))
    assert inv["gpus"] == [] and "Driver/library version mismatch" in inv["gpu_error"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
@pytest.mark.skipif(shutil.which("ibstat") is not None, reason="this machine has ibstat (the probe would run it)")
def test_local_inventory_of_this_machine(monkeypatch):
    monkeypatch.setenv("VITBENCH_IMAGE", "vitbench:test")
    inv = local_inventory()
    assert json.loads(json.dumps(inv)) == inv
    assert inv["host"] == inv["hostname"] == socket.gethostname()
    assert inv["gpus"] == [] and "nvidia-smi not found" in inv["gpu_error"] and "NVML" in inv["gpu_error"]
    assert inv["torch"] is None  # no GPU: torch not imported
    assert inv["versions"]["deepspeed"] == importlib.metadata.version("deepspeed")
    assert inv["image"] == "vitbench:test"
    assert inv["cpu"]["logical_cores"] == os.cpu_count()
    assert any(a["address"] == "127.0.0.1" for n in inv["network"] for a in n["addresses"])
    # No GPU: CPU ranks share memory; the link between nodes is read from this machine's sysfs.
    assert inv["interconnect"]["intra"]["kind"] == "shared-memory"
    assert inv["interconnect"]["inter"]["kind"] in ("ethernet", "virtual", "unknown")
    assert {i["name"] for i in inv["interconnect"]["raw"]["net"]} >= {"lo"}


def run_bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip


@pytest.mark.process
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_probe_local_json_without_gpu_and_without_torch():
    code = ("import sys; from bench.cli import main; rc = main(['probe', '--local', '--json']); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr); sys.exit(rc)")  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "NO-TORCH" in p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) == {"nodes", "unreachable", "verdict"}
    (node,) = doc["nodes"]
    assert node["gpus"] == [] and "nvidia-smi not found" in node["gpu_error"]
    assert doc["verdict"]["level"] == "ok" and doc["verdict"]["findings"][0]["code"] == "cpu-only"
    assert node["interconnect"]["intra"]["kind"] == "shared-memory" and "topo" not in node["interconnect"]["raw"]


@pytest.mark.process
def test_probe_reports_a_failing_nvidia_smi(tmp_path):
    # No driver can exist here: a stand-in nvidia-smi prints the recorded failure and exits 9 as the real one does.
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncat '{FIX / FAILURES[0]}'\nexit 9\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    p = run_bench("probe", "--local", "--json", env=env)
    assert p.returncode == 0, p.stderr
    (node,) = json.loads(p.stdout)["nodes"]
    assert "nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate" in node["gpu_error"]


@pytest.mark.process
def test_probe_hostfile_local_names_and_an_unreachable_host(tmp_path):
    # localhost and 127.0.0.1 run without ssh (bench.remote); the .invalid name fails in ssh's resolver.
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n127.0.0.1 slots=1\nno-such-host.invalid slots=1\n")
    p = run_bench("probe", "--hostfile", str(hf), "--json", "--probe-timeout", "30")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert [n["host"] for n in doc["nodes"]] == ["localhost", "127.0.0.1"]
    assert list(doc["unreachable"]) == ["no-such-host.invalid"]
    assert "[no-such-host.invalid] not probed:" in p.stderr
    assert doc["verdict"]["uniform"] is True  # over the hosts that answered
    assert doc["verdict"]["level"] == "fail"
    assert [f["hosts"] for f in doc["verdict"]["findings"] if f["code"] == "not-probed"] == [["no-such-host.invalid"]]


@pytest.mark.process
def test_probe_exclude_leaves_only_reachable_hosts(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\nno-such-host.invalid slots=1\n")
    p = run_bench("probe", "--hostfile", str(hf), "--exclude", "no-such-host.invalid")
    assert p.returncode == 0, p.stderr
    assert "verdict: OK" in p.stdout and "localhost" in p.stdout


def test_slots_limit_the_verdict_to_the_gpus_a_run_would_use():
    inv = node_inventory("rig", parse_nvidia_smi_table(text("nvidia-smi_mixed_rtx5090-rtx3090ti_partial.txt")))
    assert verdict([selected({**inv, "slots": [0, 1]})])["uniform"] is False
    only = selected({**inv, "slots": [0]})
    assert [g["name"] for g in only["gpus"]] == ["NVIDIA GeForce RTX 5090"]
    assert verdict([only])["uniform"] is True
    assert len(inv["gpus"]) == 2  # the inventory itself keeps both


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--local", "--hostfile", "hostfiles/tesla"], "--local: cannot be combined with --hostfile"),
     (["--micro-batch", "0"], "--micro-batch: must be >= 1"),
     (["--precision", "fp8"], "invalid choice: 'fp8'")],
)  # fmt: skip
def test_probe_bad_input_is_one_line_exit_2(args, message):
    p = cli("probe", *args)
    assert p.returncode == 2
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
