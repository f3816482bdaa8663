"""Plain `nvidia-smi` (and `nvidia-smi -q`) failures as findings: no driver, version mismatch, a lost GPU, ERR!.

    from bench.cluster.accel.nvidia.smi_status import findings
    findings(open("nvidia-smi.txt").read())[0]["code"]     # 'driver-not-answering'

What each message means: "NVIDIA-SMI has failed because it couldn't communicate
with the NVIDIA driver" (driver-not-answering), "Failed to initialize NVML:
Driver/library version mismatch" (driver-version-mismatch; any other NVML
initialisation failure is driver-not-answering), "Unable to determine the
device handle for GPU <bus>: Unknown Error" (gpu-unreachable, tied to that
GPU), "No devices were found" (no-gpu-found), and "ERR!" in a GPU's rows of
the table (gpu-error-state, tied to that GPU's index and bus id).
"""

from __future__ import annotations

import re

from bench.cluster.findings import finding

SOURCE = "nvidia-smi"
_HANDLE = re.compile(r"Unable to determine the device handle for (?:GPU )?([0-9A-Fa-f:.]+): (.+)$")
_ROW = re.compile(r"^\|\s+(\d+)\s+.*?\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s")


def findings(text: str, source: str = SOURCE) -> list[dict]:
    out: list[dict] = []
    lines = [ln.rstrip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("NVIDIA-SMI has failed"):
            out.append(finding("driver-not-answering", source, s))
        elif s.startswith("Failed to initialize NVML"):
            code = "driver-version-mismatch" if "version mismatch" in s.lower() else "driver-not-answering"
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            out.append(finding(code, source, f"{s} {nxt}".strip()))
        elif s.startswith("No devices were found"):
            out.append(finding("no-gpu-found", source, s))
        elif m := _HANDLE.search(s):
            out.append(finding("gpu-unreachable", source, s, bus_id=m.group(1)))
        elif m := _ROW.match(line):
            # A GPU's rows run until the table's next "+---" border; ERR! anywhere in them is that GPU's.
            block = [line]
            for nxt in lines[i + 1 :]:
                if nxt.startswith("+") or _ROW.match(nxt):
                    break
                block.append(nxt)
            if any("ERR!" in b for b in block):
                out.append(finding("gpu-error-state", source, f"GPU {m.group(1)} ({m.group(2)}) shows ERR! in "
                                   "nvidia-smi's table", bus_id=m.group(2), gpu_index=int(m.group(1))))  # fmt: skip
    return out
