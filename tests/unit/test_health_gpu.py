"""GPU health from recorded `nvidia-smi -q`, plain `nvidia-smi` and `nvidia-smi nvlink -s` outputs of unhealthy
and healthy nodes (tests/fixtures/health, tests/fixtures/gpu; each SOURCES.md says where they came from)."""

from __future__ import annotations

import pytest

from bench.cluster.accel.nvidia.gpu_state import GpuHealth, gpu_findings
from bench.cluster.accel.nvidia.nvlink import status_findings
from bench.cluster.accel.nvidia.smi_query import parse
from bench.cluster.accel.nvidia.smi_status import findings as smi_findings
from tests.health_fixtures import GPU, HEALTH, codes, text


def q(path) -> list[dict]:
    return [f for g in parse(text(path)) for f in gpu_findings(g, "nvidia-smi -q")]


def test_a10_with_a_row_remap_pending_must_be_reset_before_its_memory_is_trusted():
    gpus = parse(text(HEALTH / "nvidia-smi-q_a10_remapped-rows-pending.txt"))
    assert (gpus[0].remap_uncorrectable, gpus[0].remap_pending, gpus[0].remap_failed) == (4, True, False)
    got = q(HEALTH / "nvidia-smi-q_a10_remapped-rows-pending.txt")
    assert codes(got) == [("row-remap-pending", "fail", "reset-gpu", 0)]
    assert got[0]["bus_id"] == "0000:07:00.0"


def test_h100s_in_hw_slowdown_with_the_power_brake_asserted_are_each_degraded_by_the_chassis_power():
    got = q(HEALTH / "nvidia-smi-q_h100x8_hw-slowdown-power-brake-active.txt")
    # The power brake is the finer reason of the HW Slowdown: it is reported, not the umbrella too.
    assert codes(got) == [("throttle-power-brake", "warn", "reseat", i) for i in range(8)]
    assert got[4]["bus_id"] == "0000:9b:00.0"


def test_the_busy_h100_with_power_brake_and_sw_thermal_is_flagged_and_its_seven_idle_peers_are_healthy():
    got = q(HEALTH / "nvidia-smi-q_h100x8_gpu2-sw-power-cap-sw-thermal-active.txt")
    # SW Power Cap is not a fault: no finding for it.
    assert codes(got) == [("throttle-power-brake", "warn", "reseat", 2), ("throttle-sw-thermal", "warn", "watch", 2)]
    assert {f["bus_id"] for f in got} == {"0000:75:00.0"}


def test_sram_uncorrectable_ecc_since_boot_fails_the_gpu_and_the_lifetime_count_is_a_warning():
    got = q(HEALTH / "nvidia-smi-q_ecc-sram-uncorrectable_excerpt.txt")
    assert [(c, s, a) for c, s, a, _ in codes(got)] == [("ecc-uncorrectable-volatile", "fail", "reset-gpu"),
                                                        ("ecc-uncorrectable-aggregate", "warn", "watch")]
    g = parse(text(HEALTH / "nvidia-smi-q_ecc-sram-uncorrectable_excerpt.txt"))[0]
    assert (g.ecc_volatile_uncorrectable, g.ecc_aggregate_uncorrectable, g.bus_id) == (1, 5, None)
    assert "SRAM 1" in got[0]["what"] and "SRAM 5" in got[1]["what"]


@pytest.mark.parametrize("path", [GPU / "nvidia-smi-q_a100-sxm4-80gb_x8.txt", GPU / "nvidia-smi-q_t4_excerpt.txt",
                                  GPU / "nvidia-smi-q_rtx3070_excerpt.txt"])
def test_healthy_gpus_give_no_finding(path):
    gpus = parse(text(path))
    assert gpus and q(path) == []


def test_the_older_clocks_throttle_reasons_section_and_pcie_link_are_read():
    g = parse(text(GPU / "nvidia-smi-q_a100-sxm4-80gb_x8.txt"))[0]
    assert (g.reasons, g.pstate, g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (frozenset(), "P0", 4, 4, 16, 16)
    assert (g.index, g.bus_id, g.name) == (0, "00000000:07:00.0", "NVIDIA A100-SXM4-80GB")


def test_a_narrower_pcie_link_is_a_fault_while_a_lower_generation_is_one_only_when_the_gpu_is_busy():
    """No real `nvidia-smi -q` with a degraded link under load was found (shared SOURCES.md): the rule is
    checked on GpuHealth values, not on an output."""
    idle = GpuHealth(0, "00000000:07:00.0", pcie_gen=1, pcie_gen_max=4, pcie_width=16, pcie_width_max=16,
                     reasons=frozenset({"idle"}), pstate="P8")
    assert gpu_findings(idle, "nvidia-smi -q") == []
    busy = GpuHealth(0, "00000000:07:00.0", pcie_gen=3, pcie_gen_max=4, pcie_width=8, pcie_width_max=16,
                     reasons=frozenset(), pstate="P0")
    assert codes(gpu_findings(busy, "nvml")) == [("pcie-width-degraded", "warn", "reseat", 0),
                                                 ("pcie-gen-degraded", "warn", "reseat", 0)]


def test_nvidia_smi_that_cannot_reach_the_driver_is_a_node_failure():
    assert codes(smi_findings(text(GPU / "nvidia-smi-failed_no-driver.txt"))) == [
        ("driver-not-answering", "fail", "reboot", None)]


def test_an_nvml_library_newer_than_the_loaded_driver_needs_a_reboot():
    got = smi_findings(text(GPU / "nvidia-smi-failed_nvml-version-mismatch.txt"))
    assert codes(got) == [("driver-version-mismatch", "fail", "reboot", None)]
    assert "570.124" in got[0]["what"]   # the library version, from the second line


def test_a_gpu_whose_handle_cannot_be_had_is_unreachable_and_named_by_its_bus_id():
    got = smi_findings(text(HEALTH / "nvidia-smi-a-i0_unable-to-determine-device-handle_unknown-error.txt"))
    assert codes(got) == [("gpu-unreachable", "fail", "reboot", None)] and got[0]["bus_id"] == "0000:09:00.0"


@pytest.mark.parametrize("name", ["nvidia-smi_a100-sxm4-80gb_x8.txt", "nvidia-smi_t4x5.txt", "nvidia-smi_tesla-p4.txt"])
def test_healthy_nvidia_smi_tables_give_no_finding(name):
    assert smi_findings(text(GPU / name)) == []


@pytest.mark.parametrize("path,gpu", [(HEALTH / "nvidia-smi-nvlink-status_a100-sxm4-80gb_all-links-inactive.txt", 6),
                                      (HEALTH / "nvidia-smi-nvlink_b200_all-links-inactive_uuid-redacted.txt", 2)])
def test_a_gpu_whose_nvlinks_are_all_inactive_fails(path, gpu):
    got = status_findings(text(path))
    assert codes(got) == [("nvlink-down", "fail", "reset-gpu", gpu)] and "every NVLink link" in got[0]["what"]


def test_a_v100_with_two_of_six_nvlinks_inactive_fails_and_names_them():
    got = status_findings(text(GPU / "nvidia-smi-nvlink-s_v100-sxm2-32gb_two-inactive_excerpt.txt"))
    assert codes(got) == [("nvlink-down", "fail", "reset-gpu", 3)]
    assert "3, 5 inactive" in got[0]["what"]


def test_an_a100_with_every_nvlink_up_is_healthy():
    assert status_findings(text(GPU / "nvidia-smi-nvlink-s_a100-sxm4-80gb_2-of-8.txt")) == []
