"""nvbandwidth's text output read: each test's matrix, its unit, per GPU; and what went wrong in a test as findings.

    from bench.cluster.accel.nvidia.nvbandwidth import parse, figures, findings
    out = parse(open("nvbandwidth.txt").read())     # Output(version, driver, devices, tests)
    figures(out)    # [{"test", "kind", "method", "gpu", "peer", "gbps", "name", "bus_id"}], one per cell
    findings(out)   # nvbandwidth-data-mismatch / nvbandwidth-error, nvbandwidth's own words in "what"

Why: a GPU behind a bad riser or a retraining PCIe switch copies to and from
its host at a fraction of its link's rate while its width still reads x16;
nvbandwidth (NVIDIA/nvbandwidth) measures exactly that, and a node's saved
output is judged by `bench validate --health-from` like bench's own copies.

The text as nvbandwidth prints it (output.cpp): "nvbandwidth Version: v0.8",
"Driver Version: ...", "Device N: <name> (<domain>:<bus>:<dev>)", then per test
"Running <test>." and, when it measured, a description line ending in its unit
("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"), a header of column
indices, one line per row index ("N/A" or 0.00 on a diagonal that has no
figure), and "SUM <test> <value>". Any other line inside a test is what the
test said instead: the pattern check's "Invalid value when checking the
pattern", an "ASSERT in expression ...", a CUDA error, "Waived". Direction
comes from the description: "A(row) -> B(column)" copies row to column,
"<-" column to row, "<->" both; a host test's GPU is its column. nvbandwidth
numbers GPUs by CUDA device ordinal; its bus ids tie them to NVML's indices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.cluster.findings import finding

SOURCE = "nvbandwidth"
_DEVICE = re.compile(r"^Device (\d+): (.+?) \(([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\)\s*$")
_RUNNING = re.compile(r"^Running (\S+?)\.\s*$")
_DESC = re.compile(r"^(?P<what>.*?)(?P<a>CPU|GPU)\(row\) (?P<arrow><->|->|<-) (?P<b>CPU|GPU)\(column\) "
                   r".*\((?P<unit>[^()]+)\)\s*$|^(?P<local>memcpy local GPU\(column\).*)\((?P<unit2>[^()]+)\)\s*$")
_NUMBER = r"(?:-?\d+(?:\.\d+)?|N/A)"
_ROW = re.compile(rf"^\s*(\d+)((?:\s+{_NUMBER})+)\s*$")
_HEADER = re.compile(r"^\s*\d+(?:\s+\d+)*\s*$")
_SUM = re.compile(r"^SUM (\S+) (-?\d+(?:\.\d+)?)\s*$")
_TRAILER = ("NOTE: The reported results", "Performance can vary")
# Test name -> what it measures, by prefix (longest first); the method (ce, sm) is the name's last part.
KINDS = (("host_to_device_bidirectional_memcpy", "h2d_bidir"), ("device_to_host_bidirectional_memcpy", "d2h_bidir"),
         ("host_to_device_memcpy", "h2d"), ("device_to_host_memcpy", "d2h"),
         ("device_to_device_bidirectional_memcpy_read", "d2d_bidir_read"),
         ("device_to_device_bidirectional_memcpy_write", "d2d_bidir_write"),
         ("device_to_device_memcpy_read", "d2d_read"), ("device_to_device_memcpy_write", "d2d_write"),
         ("all_to_host", "all_to_host"), ("host_to_all", "host_to_all"), ("all_to_one", "all_to_one"),
         ("one_to_all", "one_to_all"), ("device_local_copy", "local"))  # fmt: skip


@dataclass(slots=True)
class Test:
    name: str                                   # "host_to_device_memcpy_ce"
    description: str | None = None              # the matrix's title line, as printed
    unit: str | None = None                     # "GB/s" (or "ns" for the latency tests)
    direction: str | None = None                # "->", "<-", "<->" or "local"
    row_kind: str | None = None                 # "CPU" or "GPU": what a row index numbers
    rows: dict[int, list[float | None]] = field(default_factory=dict)   # row -> value per column (None: N/A)
    total: float | None = None                  # the SUM line
    errors: list[str] = field(default_factory=list)   # what the test printed instead of (or beside) figures
    waived: bool = False

    @property
    def kind(self) -> str | None:
        return next((k for prefix, k in KINDS if self.name.startswith(prefix)), None)

    @property
    def method(self) -> str | None:
        return self.name.rsplit("_", 1)[-1] if self.name.endswith(("_ce", "_sm")) else None


@dataclass(slots=True)
class Output:
    version: str | None = None
    driver: str | None = None
    devices: dict[int, tuple[str, str]] = field(default_factory=dict)   # CUDA ordinal -> (name, bus id)
    tests: list[Test] = field(default_factory=list)
    preamble_errors: list[str] = field(default_factory=list)           # error lines before any test


def _value(word: str) -> float | None:
    return None if word == "N/A" else float(word)


def parse(text: str) -> Output:
    """The tests of one nvbandwidth run, in order; lines it does not know are a test's errors, never dropped."""
    out = Output()
    test: Test | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith(_TRAILER):
            continue
        if m := _RUNNING.match(line):
            test = Test(m.group(1))
            out.tests.append(test)
        elif m := _DEVICE.match(line):
            out.devices[int(m.group(1))] = (m.group(2).strip(), m.group(3).lower())
        elif line.startswith(("nvbandwidth Version:", "Built from Git version:", "CUDA Runtime Version:",
                              "CUDA Driver Version:", "Driver Version:")):  # fmt: skip
            key, _, value = line.partition(":")
            out.version = value.strip() if key == "nvbandwidth Version" else out.version
            out.driver = value.strip() if key == "Driver Version" else out.driver
        elif test is None:
            out.preamble_errors.append(line.strip()) if re.search(r"error|assert|fail", line, re.I) else None
        elif m := _DESC.match(line):
            test.description, test.unit = line.strip(), (m.group("unit") or m.group("unit2")).strip()
            test.direction = "local" if m.group("local") else m.group("arrow")
            test.row_kind = None if m.group("local") else m.group("a")
        elif test.description and _HEADER.match(line) and not test.rows:
            continue  # the column indices
        elif test.description and (m := _ROW.match(line)):
            test.rows[int(m.group(1))] = [_value(w) for w in m.group(2).split()]
        elif m := _SUM.match(line):
            test.total = float(m.group(2))
        elif line.strip().lower().startswith("waived"):
            test.waived = True
        else:
            test.errors.append(line.strip())
    return out


def figures(out: Output) -> list[dict]:
    """One record per measured cell: the GPU it is about (CUDA ordinal), its peer GPU for a device-to-device
    cell (the other end; None for host and local tests), GB/s, and the device's name and bus id."""
    recs = []
    for t in out.tests:
        if t.unit != "GB/s":
            continue
        for row, values in t.rows.items():
            for col, v in enumerate(values):
                if v is None or (t.row_kind == "GPU" and row == col):
                    continue  # no figure, or a device-to-device diagonal (0.00 in older versions)
                gpu, peer = (col, None) if t.row_kind != "GPU" else (row, col) if t.direction != "<-" else (col, row)
                name, bus = out.devices.get(gpu, (None, None))
                recs.append({"test": t.name, "kind": t.kind, "method": t.method, "gpu": gpu, "peer": peer,
                             "gbps": v, "name": name, "bus_id": bus})  # fmt: skip
    return recs


def findings(out: Output, source: str = SOURCE) -> list[dict]:
    """nvbandwidth-data-mismatch for a test whose copied data failed nvbandwidth's pattern check, else
    nvbandwidth-error for a test that printed an error or assert instead of (or beside) its figures."""
    found = []
    for t in out.tests:
        if not t.errors:
            continue
        words = " / ".join(t.errors)
        mismatch = any("checking the pattern" in e for e in t.errors)
        code = "nvbandwidth-data-mismatch" if mismatch else "nvbandwidth-error"
        got = f"{len(t.rows)} row(s) of figures" if t.rows else "no figure"
        found.append(finding(code, source, f"nvbandwidth {out.version or '?'} {t.name}: {words} ({got}; "
                                           f"{len(out.devices)} device(s) listed)"))  # fmt: skip
    if out.preamble_errors:
        found.append(finding("nvbandwidth-error", source, f"nvbandwidth {out.version or '?'} before any test: "
                                                          f"{' / '.join(out.preamble_errors)}"))  # fmt: skip
    return found
