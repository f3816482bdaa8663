"""One AMD GPU's inventory and health counters, whichever tool gave them (amd-smi's text, rocm-smi's JSON).

    from bench.cluster.accel.amd.readings import AmdGpu, from_amd_smi, merge
    gpus = from_amd_smi(open("amd-smi-static.txt").read())   # [AmdGpu], by amd-smi's GPU index
    gpus[0].name, gpus[0].memory_mib, gpus[0].gfx               # ('MI300A', 64289, None)

amd-smi's sections read: ASIC (MARKET_NAME, DEVICE_ID, TARGET_GRAPHICS_VERSION,
NUM_COMPUTE_UNITS), BUS (BDF, MAX_PCIE_WIDTH/SPEED), VBIOS or IFWI (firmware
VERSION, PART_NUMBER), DRIVER (VERSION), BOARD (PRODUCT_NAME), VRAM (SIZE),
RAS (BAD_PAGE_THRESHOLD_EXCEEDED, the schemas, ECC_BLOCK_STATE) from `static`;
ECC_BLOCKS (or a `-k` grep of one block: CORRECTABLE/UNCORRECTABLE/DEFERRED
counts), PCIE (WIDTH, SPEED, REPLAY_COUNT, L0_TO_RECOVERY_COUNT, NAK counts)
and THROTTLE (each *_VIOLATION_STATUS) from `metric`. N/A is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.cluster.accel.amd.text import blocks, get, number, section, value

ECC_KEYS = {"CORRECTABLE_COUNT": "correctable", "UNCORRECTABLE_COUNT": "uncorrectable", "DEFERRED_COUNT": "deferred"}
PCIE_ERRORS = ("REPLAY_COUNT", "L0_TO_RECOVERY_COUNT", "REPLAY_ROLL_OVER_COUNT", "NAK_SENT_COUNT",
               "NAK_RECEIVED_COUNT", "LC_PERF_OTHER_END_RECOVERY")  # fmt: skip


@dataclass(slots=True)
class AmdGpu:
    """What one GPU's tools said; None where they did not say."""

    index: int
    bus_id: str | None = None
    name: str | None = None             # the market name ("AMD Instinct MI350X", "MI300A"), else the board's
    board: str | None = None            # BOARD PRODUCT_NAME / rocm-smi's Card series
    device_id: str | None = None
    gfx: str | None = None              # "gfx942"
    compute_units: int | None = None
    memory_mib: int | None = None
    driver_version: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)  # "ifwi"/"vbios", "TA XGMI", ...
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_speed_gts: float | None = None
    pcie_speed_gts_max: float | None = None
    pcie_errors: dict[str, int] = field(default_factory=dict)  # PCIE_ERRORS' counters, as read
    ecc: dict[str, dict[str, int]] = field(default_factory=dict)  # block -> {"correctable", "uncorrectable", ...}
    ecc_enabled: dict[str, bool] = field(default_factory=dict)   # RAS ECC_BLOCK_STATE
    bad_pages_exceeded: bool | None = None
    throttle_active: list[str] = field(default_factory=list)     # "PPT", "SOCKET_THERMAL", "HBM_THERMAL", ...
    partition: str | None = None        # "SPX", "CPX"

    def inventory(self) -> dict:
        """The probe's shape of a GPU (bench.cluster.probe's keys), with AMD's own beside them."""
        return {"index": self.index, "name": self.name or self.board, "memory_mib": self.memory_mib,
                "bus_id": self.bus_id, "compute_capability": None, "gfx": self.gfx, "vendor": "amd",
                "driver_version": self.driver_version, "firmware": dict(self.firmware),
                "compute_units": self.compute_units, "pcie_width_max": self.pcie_width_max,
                "pcie_speed_gts_max": self.pcie_speed_gts_max, "partition": self.partition}  # fmt: skip


def _int(v: str | None) -> int | None:
    n = number(value(v))
    return None if n is None else int(n)


def _mib(v: str | None) -> int | None:
    """amd-smi's "64289 MB" (MiB, as the driver counts) or rocm-smi's bytes."""
    v = value(v)
    n = number(v)
    if n is None:
        return None
    unit = v.split()[-1].upper() if " " in v else "B"
    return int(n * {"B": 2**-20, "KB": 2**-10, "MB": 1, "GB": 2**10}.get(unit, 1))


def _gpu(index: int, d: dict) -> AmdGpu:
    g = AmdGpu(index=index, bus_id=get(d, "BUS", "BDF") or get(d, "BDF"))
    g.name, g.board = get(d, "ASIC", "MARKET_NAME"), get(d, "BOARD", "PRODUCT_NAME")
    g.device_id, g.gfx = get(d, "ASIC", "DEVICE_ID"), get(d, "ASIC", "TARGET_GRAPHICS_VERSION")
    g.compute_units = _int(get(d, "ASIC", "NUM_COMPUTE_UNITS"))
    g.memory_mib = _mib(get(d, "VRAM", "SIZE"))
    g.driver_version = get(d, "DRIVER", "VERSION")
    for fw in ("IFWI", "VBIOS"):
        if get(d, fw, "VERSION"):
            g.firmware[fw.lower()] = f"{get(d, fw, 'VERSION')}" + (f" ({get(d, fw, 'PART_NUMBER')})"
                                                                    if get(d, fw, "PART_NUMBER") else "")  # fmt: skip
    g.pcie_width_max = _int(get(d, "BUS", "MAX_PCIE_WIDTH"))
    g.pcie_speed_gts_max = number(get(d, "BUS", "MAX_PCIE_SPEED"))
    g.pcie_width, g.pcie_speed_gts = _int(get(d, "PCIE", "WIDTH")), number(get(d, "PCIE", "SPEED"))
    g.pcie_errors = {k.lower(): n for k in PCIE_ERRORS if (n := _int(get(d, "PCIE", k))) is not None}
    for block, counts in section(d, "ECC_BLOCKS").items():
        read = {name: n for key, name in ECC_KEYS.items() if (n := _int(counts.get(key))) is not None}
        if read:
            g.ecc[block] = read
    g.ecc_enabled = {b: v == "ENABLED" for b, v in section(d, "RAS").get("ECC_BLOCK_STATE", {}).items()}
    exceeded = get(d, "RAS", "BAD_PAGE_THRESHOLD_EXCEEDED")
    g.bad_pages_exceeded = None if exceeded is None else exceeded.upper() in ("TRUE", "YES", "1")
    throttle = section(d, "THROTTLE").get("THROTTLE", {})
    g.throttle_active = [k[: -len("_VIOLATION_STATUS")] for k, v in throttle.items()
                         if k.endswith("_VIOLATION_STATUS") and v.strip().upper() == "ACTIVE"]  # fmt: skip
    g.partition = get(d, "PARTITION", "COMPUTE_PARTITION")
    return g


def from_amd_smi(text: str) -> list[AmdGpu]:
    """Every GPU block of amd-smi's text output (static, metric, list, or a paste of `-g N` greps)."""
    return [_gpu(i, d) for i, d in sorted(blocks(text).items()) if d]


def merge(*lists: list[AmdGpu]) -> list[AmdGpu]:
    """Several tools' readings of the same GPUs joined by index: a later list fills what an earlier left None."""
    out: dict[int, AmdGpu] = {}
    for gpus in lists:
        for g in gpus:
            have = out.setdefault(g.index, g)
            if have is g:
                continue
            for name in AmdGpu.__slots__:
                mine, theirs = getattr(have, name), getattr(g, name)
                if mine in (None, [], {}) and theirs not in (None, [], {}):
                    setattr(have, name, theirs)
                elif isinstance(mine, dict) and isinstance(theirs, dict):
                    mine.update({k: v for k, v in theirs.items() if k not in mine})
    return [out[i] for i in sorted(out)]
