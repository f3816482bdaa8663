"""A node's health from a folder of saved outputs: the same parsers and table as the live check.

    from bench.cluster.health.saved import from_dir
    report = from_dir("node7-health/", since=None)     # report.py's shape
    [(f["code"], f["gpu_index"]) for f in report["findings"]]

The folder may hold any of: the GPU backends' saved tool outputs (each
backend's saved_files, read by it: bench.cluster.accel), dmesg.txt (any kernel-log format kernel_log reads),
ibstat.txt, infiniband/ (a copy of /sys/class/infiniband, counters included),
ibqueryerrors.txt, dcgmi-diag.txt or dcgmi-diag.json (`dcgmi diag` table or
`-j` JSON), each GPU backend's own files (the NVLink fabric's, gpud's and IMEX's
among NVIDIA's; an AMD node's amd-smi and rocm-smi outputs), and nvbandwidth.txt (nvbandwidth's text output: its figures become the
report's "copies", one per GPU and test, each with the GPU's PCIe link where
the GPU backend's readings were saved beside it; bench.validate.health judges them). A file
that is absent is "not_read" with expected=False. Bad input raises BadInput
with one line naming the file: the folder missing, none of these files in it,
a binary or unreadable file, or a file that is not what its name says
(a GPU tool's output without a GPU block, ibstat.txt without a port, ...).
The host is the folder's name.
"""

from __future__ import annotations

import os

from bench.cluster import accel
from bench.cluster.accel.nvidia import dcgm, nvbandwidth
from bench.cluster.findings import bus_key, gpu_index_for_bus
from bench.cluster.health import infiniband, kernel_log
from bench.cluster.health.report import Report
from bench.cluster.interconnect import parse_ibstat
from bench.core.capped import read_capped
from bench.core.errors import BadInput

# The vendors' own files first (each backend's saved_files), then the node's.
FILES = (*(f for b in accel.vendors() for f in b.saved_files), "dmesg.txt", "ibstat.txt", "infiniband",
         "ibqueryerrors.txt", "dcgmi-diag.json", "dcgmi-diag.txt", "nvbandwidth.txt")  # fmt: skip
GPU_FILES = tuple(f for b in accel.vendors() for f in b.saved_gpu_files)
# One node's saved report: a GPU tool's full query of 8 GPUs is about 100 KB, a full dmesg a few MB; more is a wrong file.
MAX_REPORT_BYTES = 64 << 20


def _text(path: str) -> str:
    data = read_capped(path, MAX_REPORT_BYTES, "--health-from", "a saved report")
    if b"\0" in data:
        raise BadInput(f"{path}: a binary file, not the text output its name says")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text") from None


def _kernel(r: Report, path: str, since: float | None) -> None:
    text = _text(path)
    found = kernel_log.findings(text, since=since, now=os.path.getmtime(path))
    r.add(found)
    r.read_ok("kernel-log", f"{len(text.splitlines())} line(s) of {os.path.basename(path)}, {len(found)} event group(s)")


def _ib(r: Report, folder: str) -> None:
    ports, tree, records = [], [], []
    if os.path.exists(p := os.path.join(folder, "ibstat.txt")):
        ports = parse_ibstat(_text(p))
        if not ports:
            raise BadInput(f"{p}: no CA with a port: not `ibstat` output")
    if os.path.exists(d := os.path.join(folder, "infiniband")):
        tree = infiniband.read_dir(d)
        if not tree:
            raise BadInput(f"{d}: no <ca>/ports/<n> folders: not a copy of /sys/class/infiniband")
    if os.path.exists(q := os.path.join(folder, "ibqueryerrors.txt")):
        records = infiniband.parse_ibqueryerrors(_text(q))
        if not records:
            raise BadInput(f"{q}: no 'GUID ... port ...:' line: not `ibqueryerrors` output")
    # ibstat and the sysfs copy describe the same ports: states from ibstat where saved, counters from sysfs.
    r.add(infiniband.port_findings(ports or tree) + infiniband.counter_findings(tree + records))
    r.read_ok("infiniband", f"{len(ports or tree)} port(s), {len(tree) + len(records)} with counters")
    r.not_read("gpudirect-rdma", "a saved folder holds no /sys/module to tell whether nvidia_peermem is loaded", False)


def _dcgm(r: Report, folder: str) -> None:
    for name in ("dcgmi-diag.json", "dcgmi-diag.txt"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        text = _text(path)
        if "DCGM Diagnostic" in text or "DCGM GPU Diagnostic" in text or name.endswith(".json"):
            try:
                results, runtime_error = dcgm.parse_json(text)
            except (ValueError, AttributeError) as e:
                raise BadInput(f"{path}: not dcgmi diag JSON ({e})") from None
            if runtime_error:
                r.not_read("dcgm", f"DCGM's runtime error: {runtime_error}", True)
        else:
            results = dcgm.parse_table(text)
            if not results:
                raise BadInput(f"{path}: no test row: not a `dcgmi diag` table")
        r.add(dcgm.findings(results))
        r.read_ok("dcgm", f"{len(results)} test result(s) from {name}")
        return


def _copies(r: Report, path: str) -> None:
    out = nvbandwidth.parse(_text(path))
    if not out.tests:
        raise BadInput(f"{path}: no 'Running <test>.' line: not nvbandwidth's text output")
    figs = nvbandwidth.figures(out)
    for f in figs:
        # nvbandwidth numbers GPUs by the runtime's ordinal; its bus id is the GPU's index where the GPUs were read.
        f["bus_id"] = bus_key(f["bus_id"]) or f["bus_id"]
        f["gpu_index"] = gpu_index_for_bus(r.gpus, f["bus_id"]) if r.gpus and f["bus_id"] else f["gpu"]
        g = r.links.get(f["bus_id"])
        f.update(pcie_gen=g.pcie_gen if g else None, pcie_gen_max=g.pcie_gen_max if g else None,
                 pcie_width=g.pcie_width if g else None, pcie_width_max=g.pcie_width_max if g else None,
                 name=f["name"] or (g.name if g else None))  # fmt: skip
    r.copies = figs
    r.add(nvbandwidth.findings(out))
    failed = sum(1 for t in out.tests if t.errors)
    r.read_ok("nvbandwidth", f"{len(out.tests)} test(s), {len(figs)} figure(s), {failed} failed, from "
                             f"{os.path.basename(path)} (nvbandwidth {out.version or '?'})")  # fmt: skip


def from_dir(path: str, since: float | None = None) -> dict:
    """The health report of the saved outputs in `path` (any subset of FILES)."""
    if not os.path.isdir(path):
        raise BadInput(f"{path}: no such folder")
    present = [f for f in FILES if os.path.exists(os.path.join(path, f))]
    if not present:
        raise BadInput(f"{path}: none of the files a health folder may hold ({', '.join(FILES)})")
    r = Report(os.path.basename(os.path.normpath(path)), since)
    join = lambda name: os.path.join(path, name)  # noqa: E731
    for b in accel.vendors():  # each vendor's saved tool outputs, read by its backend
        b.health_saved(r, path, set(present), _text)
    if "dmesg.txt" in present:
        _kernel(r, join("dmesg.txt"), since)
    if {"ibstat.txt", "infiniband", "ibqueryerrors.txt"} & set(present):
        _ib(r, path)
    if {"dcgmi-diag.json", "dcgmi-diag.txt"} & set(present):
        _dcgm(r, path)
    if "nvbandwidth.txt" in present:
        _copies(r, join("nvbandwidth.txt"))
    for source, files in (("gpu", GPU_FILES), ("kernel-log", ("dmesg.txt",)),
                          ("infiniband", ("ibstat.txt", "infiniband", "ibqueryerrors.txt")),
                          ("dcgm", ("dcgmi-diag.json", "dcgmi-diag.txt"))):  # fmt: skip
        if not set(files) & set(present):
            r.not_read(source, f"none of {', '.join(files)} in the folder", False)
    return r.done()
