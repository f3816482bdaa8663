"""One GPU's health counters, whichever way they were read (nvidia-smi -q text or NVML), and what they mean.

    from bench.cluster.accel.nvidia.gpu_state import GpuHealth, gpu_findings
    g = GpuHealth(index=0, bus_id="00000000:07:00.0", name="NVIDIA A10", remap_pending=True, remap_uncorrectable=4)
    gpu_findings(g, "nvidia-smi -q")[0]["code"]     # 'row-remap-pending'

A reading the source did not give (N/A, not supported, an older driver) is
None and judged by no rule. The rules, each with its source in the table:
remapped rows pending / failed, retired pages pending, uncorrectable ECC
(volatile: since the driver loaded; aggregate: lifetime), the clocks event
reasons that are faults (HW slowdown, HW thermal, power brake, SW thermal;
idle, application clocks, SW power cap, sync boost and display clock are
not), the PCIe link (a narrower link is a fault; a lower generation only
while the GPU is busy, since an idle GPU lowers it to save power), the
driver's reset/drain/reboot flags. The NVSwitch fabric state is judged by fabric_state,
which also reads its health bits, ClusterUUID and clique.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.cluster.findings import finding

# Clocks event reasons that are faults, as (reason, code); a finer reason wins over HW Slowdown, its umbrella.
FAULT_REASONS = (("hw_thermal", "throttle-hw-thermal"), ("hw_power_brake", "throttle-power-brake"),
                 ("hw_slowdown", "throttle-hw-slowdown"), ("sw_thermal", "throttle-sw-thermal"))  # fmt: skip
BUSY_PSTATES = ("P0", "P1", "P2")  # the performance states a GPU is in while it runs work


@dataclass(slots=True)
class GpuHealth:
    """What one GPU's counters say; None where the source did not say."""

    index: int | None
    bus_id: str | None
    name: str | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    retired_pending: bool | None = None
    ecc_volatile_uncorrectable: int | None = None     # DRAM + SRAM (or the older "Double Bit" total)
    ecc_aggregate_uncorrectable: int | None = None
    ecc_detail: str = ""                              # "volatile SRAM 1, DRAM 0; aggregate SRAM 5, DRAM 0"
    reasons: frozenset[str] | None = None             # active clocks event reasons: "idle", "hw_slowdown", ...
    pstate: str | None = None                         # "P0" .. "P12"
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    reset_required: bool | None = None
    drain_and_reset: bool | None = None
    reboot_required: bool | None = None
    fabric_state: str | None = None                   # "Completed", "In Progress", ...
    fabric_status: str | None = None                  # "Success", or the failure
    fabric: object | None = None                      # NVML: its fabric info (fabric_state.GpuFabric), None: not read
    nvlinks: list[dict] = field(default_factory=list)  # NVML: [{"link", "active", "errors": {name: count}}]
    unsupported: list[str] = field(default_factory=list)     # readings the GPU or driver does not offer
    unreadable: dict[str, str] = field(default_factory=dict)  # reading -> why it failed

    def as_gpu(self) -> dict:
        return {"index": self.index, "bus_id": self.bus_id, "name": self.name}

    def busy(self) -> bool | None:
        """Whether the GPU was running work when read: no Idle reason and a busy performance state."""
        if self.reasons is not None and "idle" in self.reasons:
            return False
        if self.pstate is not None:
            return self.pstate in BUSY_PSTATES
        return None if self.reasons is None else True


def gpu_findings(g: GpuHealth, source: str) -> list[dict]:
    """The findings of one GPU's readings, tied to its bus id and index."""
    out: list[dict] = []

    def add(code: str, what: str) -> None:
        out.append(finding(code, source, what, bus_id=g.bus_id, gpu_index=g.index))

    rows = f"{g.remap_uncorrectable} row(s) remapped for uncorrectable errors" if g.remap_uncorrectable is not None else ""
    if g.remap_pending:
        add("row-remap-pending", f"Remapped Rows Pending: Yes ({rows or 'count not given'})")
    if g.remap_failed:
        add("row-remap-failed", f"Remapping Failure Occurred: Yes ({rows or 'count not given'})")
    if g.retired_pending:
        add("retired-pages-pending", "Retired Pages: a page is pending retirement")
    if g.ecc_volatile_uncorrectable:
        add("ecc-uncorrectable-volatile", f"{g.ecc_volatile_uncorrectable} uncorrectable ECC error(s) since the driver "
                                          f"loaded ({g.ecc_detail})")  # fmt: skip
    if g.ecc_aggregate_uncorrectable:
        add("ecc-uncorrectable-aggregate", f"{g.ecc_aggregate_uncorrectable} uncorrectable ECC error(s) over the GPU's "
                                           f"lifetime ({g.ecc_detail})")  # fmt: skip
    reasons = g.reasons or frozenset()
    for reason, code in FAULT_REASONS:
        if reason in reasons and not (reason == "hw_slowdown" and reasons & {"hw_thermal", "hw_power_brake"}):
            add(code, f"clocks event reasons active: {', '.join(sorted(reasons))} (performance state {g.pstate or '?'})")
    if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
        add("pcie-width-degraded", f"PCIe link width x{g.pcie_width} of x{g.pcie_width_max}")
    if g.pcie_gen and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max and g.busy():
        busy = f"performance state {g.pstate or '?'}, clocks event reasons {', '.join(sorted(reasons)) or 'none'}"
        add("pcie-gen-degraded", f"PCIe Gen{g.pcie_gen} of Gen{g.pcie_gen_max} while busy ({busy})")
    if g.reset_required:
        add("gpu-reset-required", "GPU Reset Status: Reset Required: Yes")
    if g.drain_and_reset:
        add("gpu-drain-and-reset", "GPU Reset Status: Drain and Reset Recommended: Yes")
    if g.reboot_required:
        add("gpu-reboot-required", "the driver's recovery action is a node reboot")
    return out
