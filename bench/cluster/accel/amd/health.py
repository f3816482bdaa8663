"""An AMD node's health from amd-smi's and rocm-smi's outputs: ECC/RAS counters, throttling, PCIe, xGMI links.

    from bench.cluster.accel.amd.health import findings, read_saved, SAVED
    findings(gpus)                          # [finding], each tied to its GPU's index and bus id
    read_saved(report, "node7/", present)   # the saved files of SAVED in a health Report

Rules, each with its source in bench/data/health_actions.json: an
uncorrectable ECC error in any RAS block (amd-ecc-uncorrectable: the GPU's
memory or a block's data was corrupted), a deferred one (amd-ecc-deferred),
correctable ones (amd-ecc-correctable: to watch), the bad-page threshold
exceeded (amd-bad-pages-exceeded), a throttle violation active now
(amd-throttle-active: PPT, socket, VR or HBM thermal, PROCHOT), a narrower
PCIe link than the GPU's maximum (pcie-width-degraded, NVIDIA's code: the
same fault), PCIe replay or recovery counters (amd-pcie-errors), and a GPU
pair not on xGMI where the node's others are (amd-xgmi-link-down). Errors
on xGMI itself are the XGMI_WAFL block's ECC counts.
"""

from __future__ import annotations

import os
from typing import Callable

from bench.cluster.accel.amd import links, rocm_smi
from bench.cluster.accel.amd.readings import AmdGpu, from_amd_smi, merge
from bench.cluster.findings import finding
from bench.core.errors import BadInput

SOURCE = "amd-smi"
# The saved files, as `amd-smi static`, `amd-smi metric` (or its -k, --ecc-blocks, --pcie, --throttle parts),
# `amd-smi topology`, `amd-smi xgmi` and `rocm-smi --json` (-a or telegraf's list) print them.
SAVED = ("amd-smi-static.txt", "amd-smi-metric.txt", "amd-smi-topology.txt", "amd-smi-xgmi.txt", "rocm-smi.json")
GPU_FILES = ("amd-smi-static.txt", "amd-smi-metric.txt", "rocm-smi.json")   # those that list the GPUs


def findings(gpus: list[AmdGpu], source: str = SOURCE) -> list[dict]:
    out: list[dict] = []
    for g in gpus:
        def add(code: str, what: str, g=g) -> None:
            out.append(finding(code, source, f"GPU {g.index}{f' ({g.name})' if g.name else ''}: {what}",
                               bus_id=g.bus_id, gpu_index=g.index))  # fmt: skip

        for kind, code in (("uncorrectable", "amd-ecc-uncorrectable"), ("deferred", "amd-ecc-deferred"),
                           ("correctable", "amd-ecc-correctable")):  # fmt: skip
            hit = {b: c[kind] for b, c in g.ecc.items() if c.get(kind)}
            if hit:
                add(code, f"{kind} ECC errors: " + ", ".join(f"{b} {n}" for b, n in hit.items()))
        if g.bad_pages_exceeded:
            add("amd-bad-pages-exceeded", "RAS BAD_PAGE_THRESHOLD_EXCEEDED: the retired pages passed the threshold")
        if g.throttle_active:
            add("amd-throttle-active", f"throttle violation active: {', '.join(g.throttle_active)}")
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            add("pcie-width-degraded", f"PCIe link width x{g.pcie_width} of x{g.pcie_width_max}")
        errs = {k: n for k, n in g.pcie_errors.items() if n}
        if errs:
            add("amd-pcie-errors", "PCIe counters " + ", ".join(f"{k} {n}" for k, n in errs.items()))
    return out


def link_findings(pairs: dict[tuple, str], gpus: list[AmdGpu], source: str) -> list[dict]:
    """A finding per pair off xGMI (pairs by bus id or card number), tied to the pair's first GPU."""
    index = {g.bus_id: g.index for g in gpus if g.bus_id}
    out = []
    for a, b in links.not_xgmi(pairs):
        first = index.get(a, a if isinstance(a, int) else None)
        out.append(finding("amd-xgmi-link-down", source, f"GPUs {a} and {b}: {pairs.get((a, b)) or pairs.get((b, a))}"
                           f" where the node's other pairs are XGMI", gpu_index=first,
                           bus_id=a if isinstance(a, str) else None))  # fmt: skip
    return out


def read_saved(report, folder: str, present: set[str], read_text: Callable[[str], str]) -> None:
    """The saved AMD outputs among `present` into `report` (bench.cluster.health.report.Report): the GPUs, their
    inventory (the report's "gpus", with memory, gfx target, driver and firmware), the findings, and what each
    file gave; each file through `read_text` (bench.cluster.health.saved's reader)."""
    if set(SAVED) & present:
        read_texts(report, {n: read_text(os.path.join(folder, n)) for n in SAVED if n in present}, folder)


def read_texts(report, texts: dict[str, str], folder: str = "") -> None:
    """The same from the outputs themselves ({file name: text}; live: as the tools printed them now)."""
    lists, pairs, said = [], {}, []
    for name, text in texts.items():
        path = os.path.join(folder, name)
        if name == "rocm-smi.json":
            try:
                gpus, system = rocm_smi.parse(text)
            except ValueError as e:
                raise BadInput(f"{path}: not rocm-smi's JSON ({e})") from None
            pairs.update(system["links"])
        elif name in ("amd-smi-topology.txt", "amd-smi-xgmi.txt"):
            table = links.xgmi_table(text) if name == "amd-smi-xgmi.txt" else {}
            got = links.link_types(text) if not table else {(a, b): v["link_type"] for a, v in table.items()
                                                            for b in table if a != b}  # fmt: skip
            if not got:
                raise BadInput(f"{path}: no LINK TYPE or LINK METRIC table: not `amd-smi topology`/`xgmi` output")
            pairs.update(got)
            said.append(f"{len({a for a, _ in got})} GPU(s)' links from {name}")
            continue
        else:
            gpus = from_amd_smi(text)
        if not gpus:
            raise BadInput(f"{path}: no GPU block ('GPU: N' or an amd-smi prompt): not {name[:-4]} output")
        lists.append(gpus)
        said.append(f"{len(gpus)} GPU(s) from {name}")
    gpus = merge(*lists)
    if gpus:
        report.gpus = [g.inventory() for g in gpus]   # index, bus_id, name, and AMD's own beside them
    report.add(findings(gpus) + link_findings(pairs, gpus, SOURCE))
    report.read_ok("amd", "; ".join(said))
