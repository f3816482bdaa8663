"""Free space under the folders bench writes to (--out, /tmp): below a floor is a finding.

    from bench.cluster.health.host import disk_findings
    findings, read = disk_findings(["/tmp", "results"])    # ([], {"/tmp": "41.2 GiB free", ...}) on a roomy disk

Two floors. Under bench.core.storage.floor_bytes for 8 ranks (what every run
writes whatever its length: 160 KiB) no run can finish there: disk-full
(fail). Under 1 GiB a run finishes but torch's, Triton's and DeepSpeed's
caches under /tmp and ~/.cache, and a hung run's stack and flight-recorder
dumps, may not fit: disk-low (warn). The 1 GiB is this project's rule of
thumb, not a measurement, and the table says so. A folder that does not exist
is judged on the nearest folder above it that does (where it would be made).
"""

from __future__ import annotations

import os

from bench.cluster.findings import finding
from bench.core.storage import floor_bytes, free_bytes

SOURCE = "disk"
LOW_BYTES = 1 << 30
FULL_BYTES = floor_bytes(8)


def _existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def disk_findings(folders, low: int = LOW_BYTES, full: int = FULL_BYTES) -> tuple[list[dict], dict[str, str]]:
    """(findings, {folder: "N GiB free" or why it could not be read}) for each folder."""
    out, read = [], {}
    for folder in dict.fromkeys(folders):
        where = _existing(folder)
        free = free_bytes(where)
        if free is None:
            read[folder] = f"free space of {where} unknown (statvfs failed)"
            continue
        read[folder] = f"{_gib(free)} free on {where}"
        if free < full:
            out.append(finding("disk-full", SOURCE, f"{folder}: {_gib(free)} free on {where}, below the "
                               f"{full // 1024} KiB the smallest run writes"))  # fmt: skip
        elif free < low:
            out.append(finding("disk-low", SOURCE, f"{folder}: {_gib(free)} free on {where}, below the {_gib(low)} floor "
                               "for caches and dumps"))  # fmt: skip
    return out, read
