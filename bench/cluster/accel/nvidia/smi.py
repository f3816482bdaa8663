"""nvidia-smi: the one place bench runs it, and pure parsers of its output, tested on recorded outputs.

    from bench.cluster.accel.nvidia.smi import gpu_count, query_gpus
    gpu_count()      # (GPUs `nvidia-smi -L` lists, how that was found, whether nvidia-smi failed)
    query_gpus()     # {"gpus", "driver_version", "cuda_version", "error", "source"} from --query-gpu

    from bench.cluster.accel.nvidia.smi import parse_nvidia_smi_table, parse_query_csv, parse_nvidia_smi_q
    parse_query_csv("0, NVIDIA H200, 143771, 9.0, 570.211.01, 00000000:18:00.0")["gpus"]
    parse_nvidia_smi_table(open("smi.txt").read())   # {"gpus", "driver_version", "cuda_version", "error"}

Each returns {"gpus": [...], "driver_version", "cuda_version", "error"}; a GPU
is {"index", "name", "memory_mib", "cc", "cc_source", "pci_bus_id"}, None
where the output does not say. A failure message instead of a table
("NVIDIA-SMI has failed ...", "Failed to initialize NVML ...") comes back
as no GPUs and that message in "error".
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from dataclasses import dataclass

# One deadline for every nvidia-smi call: a driver that hangs (a GPU fallen off
# the bus) must not hold a command longer, and a slow healthy one answers in 1-3 s.
NVIDIA_SMI_TIMEOUT_S = 20.0
QUERY_FIELDS = ("index", "name", "memory.total", "compute_cap", "driver_version", "pci.bus_id", "mig.mode.current",
                "uuid")

_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.*?)\s+(?:On|Off)\s+\|\s+(" + _BUS_ID + r")\s+(?:On|Off)\s+\|")
_TABLE_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_Q_GPU = re.compile(r"^GPU\s+(" + _BUS_ID + r")\s*$")


def _none(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value.casefold() in _NA else value


def smi_failure(text: str) -> str | None:
    """The failure nvidia-smi printed instead of GPUs, as one line, or None."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("NVIDIA-SMI has failed") or line.startswith("No devices were found"):
            return line
        if line.startswith("Failed to initialize NVML"):
            # Newer drivers add the library version on the next line: keep it, it says which side is stale.
            return "; ".join(lines[i : i + 2])
    return None


def result(gpus: list[dict] | None = None, driver: str | None = None, cuda: str | None = None,
            error: str | None = None) -> dict:  # fmt: skip
    return {"gpus": gpus or [], "driver_version": driver, "cuda_version": cuda, "error": error}


def gpu_record(index: int, name: str | None, memory_mib: int | None, cc: str | None, bus: str | None,
         cc_source: str | None, mig: str | None = None, uuid: str | None = None) -> dict:  # fmt: skip
    """One GPU; mig is its MIG mode as the driver says it (Enabled, Disabled), None where not told; uuid its
    GPU-... UUID (two hostfile names whose GPUs share one are one machine: bench.cluster.same_machine)."""
    return {"index": index, "name": name, "memory_mib": memory_mib, "cc": cc,
            "cc_source": cc_source if cc else None, "pci_bus_id": bus, "mig": mig, "uuid": uuid}  # fmt: skip


def _mib(value: str | None) -> int | None:
    value = _none(value)
    if value is None:
        return None
    m = re.match(r"(\d+)", value)
    return int(m.group(1)) if m else None


def parse_query_csv(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> dict:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` -> {gpus, driver_version, ...}.

    With a header row the columns are read from it (any subset and order, units
    like "[MiB]" allowed); without one they are `fields`. Rows without an index
    column are numbered in order, as nvidia-smi lists them.
    """
    failure = smi_failure(text)
    if failure:
        return result(error=failure)
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if any(c.strip() for c in r)]
    if not rows:
        return result(error="nvidia-smi printed no GPU rows")
    cols = list(fields)
    header = [re.sub(r"\s*\[.*\]$", "", c.strip()) for c in rows[0]]
    if all(re.fullmatch(r"[a-z_.]+", c) for c in header):
        cols, rows = header, rows[1:]
    gpus: list[dict] = []
    driver = None
    for n, row in enumerate(rows):
        rec = {c: _none(v) for c, v in zip(cols, row)}
        driver = driver or rec.get("driver_version")
        index = int(rec["index"]) if rec.get("index") else n
        cc = rec.get("compute_cap")
        gpus.append(gpu_record(index, rec.get("name"), _mib(rec.get("memory.total")), cc, rec.get("pci.bus_id"),
                         "nvidia-smi", rec.get("mig.mode.current"), rec.get("uuid")))  # fmt: skip
    return result(gpus, driver)


def _header_versions(text: str) -> tuple[str | None, str | None]:
    # Drivers from 610 print "KMD Version" / "CUDA UMD Version" in place of these.
    driver = re.search(r"(?:Driver|KMD) Version\s*:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA (?:UMD )?Version\s*:\s*([\d.]+)", text)
    return (driver.group(1) if driver else None), (cuda.group(1) if cuda else None)


def parse_nvidia_smi_table(text: str) -> dict:
    """Plain `nvidia-smi` output -> {gpus, driver_version, cuda_version, error}.

    Names may be cut ("NVIDIA A100-SXM..."): bench.core.gpus.lookup resolves them
    where the memory leaves one candidate. The table has no compute capability.
    """
    failure = smi_failure(text)
    if failure:
        return result(error=failure)
    driver, cuda = _header_versions(text)
    lines = text.splitlines()
    gpus: list[dict] = []
    for i, line in enumerate(lines):
        m = _TABLE_GPU.match(line)
        if not m:
            continue
        mem = _TABLE_MEM.search(lines[i + 1]) if i + 1 < len(lines) else None
        gpus.append(gpu_record(int(m.group(1)), m.group(2).strip(), int(mem.group(2)) if mem else None, None,
                         m.group(3), None))  # fmt: skip
    if not gpus and driver is None:
        return result(error="not nvidia-smi output (no header, no GPU rows)")
    return result(gpus, driver, cuda)


def parse_nvidia_smi_q(text: str) -> dict:
    """`nvidia-smi -q` -> {gpus, driver_version, cuda_version, error}; GPUs indexed in listed order."""
    failure = smi_failure(text)
    if failure:
        return result(error=failure)
    driver, cuda = _header_versions(text)
    gpus: list[dict] = []
    section = ""
    for line in text.splitlines():
        m = _Q_GPU.match(line)
        if m:
            gpus.append(gpu_record(len(gpus), None, None, None, m.group(1), None))
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, _, value = (part.strip() for part in line.partition(":"))
        if indent == 4:
            section = key
            if key == "Product Name":
                gpus[-1]["name"] = _none(value)
        elif indent == 8 and section == "FB Memory Usage" and key == "Total":
            gpus[-1]["memory_mib"] = _mib(value)
        elif indent == 8 and section == "MIG Mode" and key == "Current":
            gpus[-1]["mig"] = _none(value)
    if not gpus and driver is None:
        return result(error="not nvidia-smi -q output (no header, no GPU section)")
    return result(gpus, driver, cuda)


# A physical GPU line of `nvidia-smi -L`: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)".
# MIG instances are indented "  MIG 1g.10gb Device 0: ..." lines under their GPU and are
# not counted: a slot is what DeepSpeed's launcher puts one rank on.
_GPU_LINE = re.compile(r"GPU [0-9]+: ")


def count_gpus(nvidia_smi_l: str) -> int:
    """Physical GPUs in `nvidia-smi -L` output."""
    return sum(1 for line in nvidia_smi_l.splitlines() if _GPU_LINE.match(line))


@dataclass(frozen=True, slots=True)
class SmiAnswer:
    """What one nvidia-smi call gave: its output, or `failure` (one line) when it did not answer or failed."""

    rc: int | None
    stdout: str
    stderr: str
    failure: str | None = None   # "exited 9: NVIDIA-SMI has failed ...", "no answer within 20s", ...
    missing: bool = False        # no nvidia-smi on PATH: no driver, not a failure
    why: str | None = None       # what it printed instead of an answer (the line after "exited N: ")


def run_smi(args: list[str], timeout: float = NVIDIA_SMI_TIMEOUT_S) -> SmiAnswer:
    """Run `nvidia-smi ARGS` with the one deadline; never raises."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return SmiAnswer(None, "", "", "nvidia-smi not found", missing=True)
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return SmiAnswer(None, "", "", f"no answer within {timeout:g}s")
    except OSError as e:
        return SmiAnswer(None, "", "", str(e.strerror or e))
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        why = smi_failure(out) or (out.strip().splitlines() or ["no output"])[0]
        return SmiAnswer(proc.returncode, proc.stdout, proc.stderr, f"exited {proc.returncode}: {why}", why=why)
    return SmiAnswer(0, proc.stdout, proc.stderr)


def gpu_count() -> tuple[int, str, bool]:
    """(GPUs `nvidia-smi -L` lists, how that was found, whether nvidia-smi failed); torch-free."""
    a = run_smi(["-L"])
    if a.missing:
        return 0, "no nvidia-smi", False
    if a.failure:
        return 0, (f"nvidia-smi -L exited {a.rc} ({a.why})" if a.why else f"nvidia-smi -L failed ({a.failure})"), True
    n = count_gpus(a.stdout)
    return n, (f"nvidia-smi -L: {n} GPU(s)" if n else "nvidia-smi -L listed no GPU"), False


def query_gpus() -> dict:
    """GPUs through `nvidia-smi --query-gpu`; drops the fields a driver lacks (compute_cap, mig.mode.current)."""
    fields = QUERY_FIELDS
    for _ in range(3):
        a = run_smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        if a.failure is None:
            return {**parse_query_csv(a.stdout, fields), "source": "nvidia-smi"}
        # Older drivers know neither compute_cap (before ~510) nor the MIG fields (before 450): ask without.
        unknown = [f for f in ("compute_cap", "mig.mode.current") if f in fields and f in a.stdout + a.stderr]
        if not unknown:
            break
        fields = tuple(f for f in fields if f not in unknown)
    return result(error=f"nvidia-smi {a.failure}" if not a.missing else a.failure)
