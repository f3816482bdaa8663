"""Published bus bandwidths per interconnect and matmul FLOP/s per GPU, scaled to one node.

    from bench.analysis.references import load
    table = load()
    ref = table.link_for("inter", node)          # node: one inventory dict (probe), with "gpus" and "interconnect"
    ref.busbw, ref.label                         # 376e9, '400G NDR IB/RoCE x 8 NIC(s): 376 GB/s'
    table.matmul_for("NVIDIA H100 80GB HBM3", "bf16").flops      # 794.5e12

The entries live in bench/data/reference_throughput.json (intra_node_busbw,
inter_node_busbw, matmul), each with its source; the file's _about states the
scaling rules applied here: NVLink per link x active links, PCIe per x16 x
width / 16, and between nodes per NIC x min(active NICs, GPUs per node),
capped at the node's intra-node reference. None wherever nothing published
fits: every CPU node, virtual links, unknown kinds, rates without an entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from bench.core.errors import BadInput
from bench.core.gpus import lookup, normalise

SCOPES = {"intra": ("nvswitch", "nvlink", "pcie"), "inter": ("infiniband", "roce", "ethernet")}
# The value field of an entry says what it is per, and so how link_for scales it.
PER = {"intra": {"busbw_bytes_per_s": "node", "per_link_bytes_per_s": "link", "per_x16_bytes_per_s": "x16"},
       "inter": {"per_nic_bytes_per_s": "nic", "per_gbps_bytes_per_s": "gbps"}}  # fmt: skip


@dataclass(frozen=True, slots=True)
class LinkReference:
    """The all_reduce busbw expected of THIS node's links, already scaled by the file's rule."""

    scope: str              # "intra" | "inter"
    kind: str               # the node's kind: nvswitch, nvlink, pcie, infiniband, roce, ethernet
    busbw: float            # bytes/s
    lower: float | None     # fractions, as Reference's
    upper: float | None
    size: int | None        # message bytes the figure was published at, None where the source gives none
    label: str              # a table cell: "NVSwitch 8x H100 (NVLS): 480 GB/s"
    source: str
    derived: bool = False   # computed from a link rate (the entry says how), not measured
    rule: str = ""          # how busbw came from the entry for this node


@dataclass(frozen=True, slots=True)
class MatmulReference:
    """The best measured dense matmul of a GPU model and dtype, with tolerances."""

    gpu: str
    dtype: str
    flops: float            # FLOP/s
    lower: float | None
    upper: float | None
    source: str


@dataclass(frozen=True, slots=True)
class LinkEntry:
    """One row of intra_node_busbw / inter_node_busbw as the file states it."""

    scope: str
    kinds: tuple[str, ...]
    per: str
    value: float
    gpu: tuple[str, ...]        # normalised model names (published node figures)
    gpus: int | None
    cc: str | None
    pcie_gen: int | None
    rate_gbps: float | None
    size: int | None
    lower: float | None
    upper: float | None
    label: str
    source: str
    derived: bool


def _num(v, where: str, *, positive: bool = False, optional: bool = True) -> float | None:
    if v is None and optional:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or (positive and v <= 0):
        raise BadInput(f"{where}: must be a {'positive ' if positive else ''}number{' or null' if optional else ''}, "
                       f"got {v!r}")  # fmt: skip
    return float(v)


def _text(e: dict, key: str, where: str) -> str:
    v = e.get(key)
    if not isinstance(v, str) or not v.strip():
        raise BadInput(f"{where}: {key} must be a non-empty string, got {v!r}")
    return v


def _names(v, where: str) -> tuple[str, ...]:
    names = [v] if isinstance(v, str) else v
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise BadInput(f"{where}: must be a name or a non-empty list of names, got {v!r}")
    return tuple(names)


def parse_link_entries(raw: dict, path: str, scope: str) -> tuple[LinkEntry, ...]:
    key = f"{scope}_node_busbw"
    rows = raw.get(key, [])
    if not isinstance(rows, list):
        raise BadInput(f"{path}: {key} must be a list")
    out = []
    for i, e in enumerate(rows):
        where = f"{path}: {key}[{i}]"
        if not isinstance(e, dict):
            raise BadInput(f"{where}: must be an object")
        kinds = _names(e.get("kind"), f"{where}.kind")
        if bad := [k for k in kinds if k not in SCOPES[scope]]:
            raise BadInput(f"{where}.kind: {bad[0]!r} is not one of {', '.join(SCOPES[scope])}")
        given = [f for f in PER[scope] if f in e]
        if len(given) != 1:
            raise BadInput(f"{where}: needs exactly one of {', '.join(PER[scope])}")
        per = PER[scope][given[0]]
        gpus = e.get("gpus")
        if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 2):
            raise BadInput(f"{where}.gpus: must be a GPU count >= 2 or null, got {gpus!r}")
        size = e.get("size_bytes")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
            raise BadInput(f"{where}.size_bytes: must be a positive integer or null, got {size!r}")
        entry = LinkEntry(
            scope, kinds, per, _num(e[given[0]], f"{where}.{given[0]}", positive=True, optional=False),
            tuple(normalise(n) for n in _names(e["gpu"], f"{where}.gpu")) if "gpu" in e else (),
            gpus, e.get("cc"), e.get("pcie_gen"), _num(e.get("rate_gbps"), f"{where}.rate_gbps", positive=True), size,
            _num(e.get("lower"), f"{where}.lower"), _num(e.get("upper"), f"{where}.upper"),
            _text(e, "label", where), _text(e, "source", where), bool(e.get("derived", False)))  # fmt: skip
        needs = {"node": ("gpu", entry.gpu), "link": ("cc", entry.cc), "x16": ("pcie_gen", entry.pcie_gen),
                 "nic": ("rate_gbps", entry.rate_gbps)}.get(per)  # fmt: skip
        if needs and not needs[1]:
            raise BadInput(f"{where}: {given[0]} needs {needs[0]}")
        out.append(entry)
    return tuple(out)


def parse_matmul(raw: dict, path: str) -> tuple[MatmulReference, ...]:
    out = []
    for i, e in enumerate(raw.get("matmul", [])):
        where = f"{path}: matmul[{i}]"
        if not isinstance(e, dict):
            raise BadInput(f"{where}: must be an object")
        tflops = _num(e.get("tflops"), f"{where}.tflops", positive=True, optional=False)
        for name in _names(e.get("gpu"), f"{where}.gpu"):
            out.append(MatmulReference(name, _text(e, "dtype", where), tflops * 1e12, _num(e.get("lower"), f"{where}.lower"),
                                       _num(e.get("upper"), f"{where}.upper"), _text(e, "source", where)))  # fmt: skip
    return tuple(out)


def _model(gpu: dict) -> str:
    spec = lookup(gpu["name"], gpu.get("memory_mib")) if gpu.get("name") else None
    return normalise(gpu.get("model") or (spec.name if spec else gpu.get("name") or "?"))


def _ref(e: LinkEntry, kind: str, busbw: float, label: str, rule: str) -> LinkReference:
    return LinkReference(e.scope, kind, busbw, e.lower, e.upper, e.size, label, e.source, e.derived, rule)


def _intra_for(entries: tuple[LinkEntry, ...], part: dict, gpus: list[dict], n: int) -> LinkReference | None:
    kind = part.get("kind")
    if kind not in SCOPES["intra"] or n < 2:
        return None
    models = {_model(g) for g in gpus}
    ccs = {g.get("cc") for g in gpus}
    links, pair = part.get("links_per_gpu"), part.get("nv_pair_links")
    for e in entries:
        if kind not in e.kinds:
            continue
        if e.per == "node" and models <= set(e.gpu) and e.gpus in (None, n):
            return _ref(e, kind, e.value, e.label, f"published for {e.gpus or 'any number of'} GPUs")
        if e.per == "link" and ccs == {e.cc} and part.get("all_pairs"):
            # Through switches each GPU drives all its links; a direct pair drives the links between them.
            count = (links or pair) if kind == "nvswitch" else (pair if n == 2 else None)
            if count:
                bw = e.value * count
                return _ref(e, kind, bw, f"NVLink sm_{e.cc.replace('.', '')} x {count} links: {bw / 1e9:.0f} GB/s "
                            "(derived)", f"{e.value / 1e9:g} GB/s per link x {count} links per GPU")  # fmt: skip
        if e.per == "x16" and (p := part.get("pcie")) and p.get("gen") == e.pcie_gen:
            bw = e.value * p["width"] / 16
            return _ref(e, kind, bw, f"PCIe Gen{e.pcie_gen} x{p['width']}: {bw / 1e9:.0f} GB/s (derived)",
                        f"{e.value / 1e9:g} GB/s per x16 x {p['width']}/16 lanes (the slowest GPU's link)")  # fmt: skip
    return None


def _inter_for(entries: tuple[LinkEntry, ...], part: dict, n: int) -> LinkReference | None:
    kind, rate, ports = part.get("kind"), part.get("rate_gbps"), part.get("ports") or 0
    if kind not in SCOPES["inter"] or not rate:
        return None
    for e in entries:
        if kind not in e.kinds:
            continue
        if e.per == "nic" and abs(e.rate_gbps - rate) < 0.5 and ports:
            used = min(ports, n)   # one NIC per GPU: the file's _about
            bw = e.value * used
            return _ref(e, kind, bw, f"{e.label.split(':')[0]} x {used} NIC(s): {bw / 1e9:.0f} GB/s",
                        f"{e.value / 1e9:g} GB/s per NIC x {used} (min of {ports} active at {rate:g} Gb/s, {n} GPUs)")
        if e.per == "gbps":
            bw = e.value * rate
            return _ref(e, kind, bw, f"{rate:g} Gb/s TCP: {bw / 1e9:.2f} GB/s (derived)",
                        f"{e.value / 1e9:g} GB/s per Gb/s of line rate x {rate:g} Gb/s, one interface")
    return None


def link_for(intra: tuple[LinkEntry, ...], inter: tuple[LinkEntry, ...], scope: str, node: dict,
             gpus_per_node: int | None = None) -> LinkReference | None:  # fmt: skip
    """The reference for one node's intra- or inter-node all_reduce; gpus_per_node: the job's ranks on it
    (default: its slots, else all its GPUs)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be 'intra' or 'inter', not {scope!r}")
    gpus = node.get("gpus") or []
    part = (node.get("interconnect") or {}).get(scope)
    if not gpus or not isinstance(part, dict):
        return None
    n = gpus_per_node or len(node.get("slots") or []) or len(gpus)
    if scope == "intra":
        return _intra_for(intra, part, gpus, n)
    ref = _inter_for(inter, part, n)
    cap = _intra_for(intra, (node.get("interconnect") or {}).get("intra") or {}, gpus, n) if ref else None
    if ref and cap and cap.busbw < ref.busbw:
        # The rings cross the node's own links too: the network cannot be used faster than those.
        ref = replace(ref, busbw=cap.busbw, rule=f"{ref.rule}; capped at the intra-node {cap.label}")
    return ref


def matmul_for(refs: tuple[MatmulReference, ...], gpu_name: str, dtype: str) -> MatmulReference | None:
    spec = lookup(gpu_name)
    keys = {normalise(gpu_name)} | ({normalise(spec.name)} if spec else set())
    return next((r for r in refs if normalise(r.gpu) in keys and r.dtype == dtype), None)
