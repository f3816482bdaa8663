"""A GPU's copies judged (to and from its host, within its memory) against its peers and the published figure.

    from bench.analysis.copies import load, judge
    table = load()                                     # bench/data/copy_references.json
    table.host_link("NVIDIA H100 80GB HBM3", gen=5, width=16).h2d_gbps    # 56.68, with .source
    rows = judge([{"gpu": "node1:0", "model": "NVIDIA H100 80GB HBM3", "kind": "h2d", "gbps": 14.2,
                   "pcie_gen": 5, "pcie_width": 16}, ...], table)
    rows[0].status, rows[0].code, rows[0].line         # 'FAIL', 'copy-slow', 'node1:0: H2D 14.20 GB/s ...'

Why: a GPU behind a bad riser, a PCIe switch that retrains or a rank on the
far socket copies at a fraction of its link while its width reads x16; a
GPU whose memory is slow copies device-to-device slowly. Each figure is
judged twice, and the worse verdict stands:
  - against its peers: the same model, kind, PCIe generation and width (for
    device-to-device: the same model), by bench.analysis.peer_lines (three
    peers or more; WARN below the noise line, FAIL below max(noise, the
    table's 1 - fail share), not the compute straggler line);
  - against the table: a host copy against its link's published copy, a
    device-to-device copy against its memory's published copy, or, where
    none was published, its datasheet peak x copy_share (derived, and the
    line says so). WARN under lines.warn x it, FAIL under lines.fail x it.
Kinds: "h2d", "d2h" (host copies, one direction alone), "d2d" (a copy
within one GPU's memory; bytes read and written both counted), "local"
(nvbandwidth's device_local_copy: bytes copied once, doubled here). Any
other kind (both directions at once, GPU to GPU) is judged by peers only.
A code (the health table's: copy-slow, copy-low, memory-copy-slow,
memory-copy-low) goes with each WARN and FAIL.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from bench.analysis import peer_lines
from bench.core.gpus import normalise

HOST, MEMORY = ("h2d", "d2h"), ("d2d", "local")
# The least noise of a copy timed by the host clock (a CPU rank's): identical CPU ranks of the suite's namespace
# hosts, on two shared cores, spread +-4% in one run and a rank's two turns differed by up to 8% (2026-12-05, four
# healthy validates); a GPU's copy timed by CUDA events agrees with its peers' within 1% (nvbandwidth#6, #24).
HOST_CLOCK_FLOOR = (0.10, "a copy timed by the host clock on shared cores")
COUNTED_ONCE = {"local": 2}   # kinds whose tool counts a copied byte once: x 2 to count its read and its write
CODES = {("host", "FAIL"): "copy-slow", ("host", "WARN"): "copy-low", ("memory", "FAIL"): "memory-copy-slow",
         ("memory", "WARN"): "memory-copy-low"}  # fmt: skip
_ORDER = ("PASS", "WARN", "FAIL")


@dataclass(frozen=True, slots=True)
class Reference:
    gbps: float | None     # what a healthy copy reaches here (None: nothing published: peers only)
    label: str             # "PCIe gen5 x16 H2D", "HBM3 (NVIDIA H100 80GB HBM3)"
    source: str            # the whole source, for the record
    cite: str = ""         # its short form, for the one line a person reads
    derived: str = ""      # how gbps came from a published figure, where it did not come as it is


@dataclass(frozen=True, slots=True)
class Verdict:
    gpu: str               # as the caller named it: "node1:3" or "GPU 3 (0000:19:00.0)"
    kind: str
    gbps: float            # as judged (a device_local_copy figure doubled)
    status: str            # PASS, WARN, FAIL
    code: str | None       # the health table's code for a WARN or FAIL
    line: str              # one line: the GPU, the figure, the peers' median, the reference and its source
    reference: Reference | None
    peers: peer_lines.Lines | None


class Table:
    def __init__(self, raw: dict):
        self.raw = raw
        self.warn, self.fail = raw["lines"]["warn"], raw["lines"]["fail"]

    def _model(self, section: str, model: str | None) -> tuple[str, dict] | None:
        key = normalise(model or "")
        return next(((name, e) for name, e in self.raw[section].items() if normalise(name) == key), None)

    def host_link(self, model: str | None, gen: int | None = None, width: int | None = None,
                  link: str | None = None) -> tuple[str, dict, float] | None:
        """(link, entry, width / 16) of a GPU's host link: the named link, else PCIe `gen`, else its model's."""
        if link is None and gen:
            link = f"pcie{gen}"
        if link is None and (m := self._model("models", model)):
            link = m[1]["host_link"]
        e = self.raw["host_links"].get(link or "")
        return (link, e, (width or 16) / 16) if e else None

    def reference(self, kind: str, model: str | None, gen: int | None = None, width: int | None = None,
                  link: str | None = None) -> Reference | None:
        if kind in HOST:
            found = self.host_link(model, gen, width, link)
            if not found:
                return None
            name, e, scale = found
            label = e["label"] if scale == 1 else e["label"].replace("x16", f"x{round(16 * scale)}")
            v = e[f"{kind}_gbps"]
            return Reference(v * scale if v else None, f"{label} {kind.upper()}", e["source"], e["cite"],
                             f"x16 figure {v:g} x {scale:g}" if v and scale != 1 else "")
        if kind in MEMORY and (m := self._model("memory", model)):
            name, e = m
            label = f"{e['kind']} ({name})"
            if e.get("copy_gbps"):
                return Reference(e["copy_gbps"], label, e["source"], e["cite"])
            share = self.raw["copy_share"]
            return Reference(e["peak_gbps"] * share, label, e["source"], e["cite"],
                             f"peak {e['peak_gbps']:g} x copy_share {share:g}: no copy published")
        return None


@functools.cache
def _default() -> Table:
    return Table(json.loads(resources.files("bench").joinpath("data/copy_references.json").read_text("utf-8")))


def load(path: str | None = None) -> Table:
    """The table of bench/data/copy_references.json, or of `path`."""
    if path is None:
        return _default()
    with open(path, encoding="utf-8") as f:
        return Table(json.load(f))


def _peer_key(f: dict) -> tuple:
    kind = f["kind"]
    link = (f.get("pcie_gen"), f.get("pcie_width")) if kind in HOST else ()
    return (normalise(f.get("model") or ""), kind, f.get("method"), *link)


def _by_reference(value: float, ref: Reference | None, table: Table) -> tuple[str, str]:
    if ref is None:
        return "PASS", "no published figure for it: peers only"
    if ref.gbps is None:
        return "PASS", f"nothing published for {ref.label}: peers only ({ref.cite})"
    share = value / ref.gbps
    status = "FAIL" if share < table.fail else "WARN" if share < table.warn else "PASS"
    how = f"; {ref.derived}" if ref.derived else ""
    return status, f"{share:.0%} of {ref.gbps:.2f} GB/s published for {ref.label}{how} ({ref.cite})"


def _peer_lines(values: list[float], fail_share: float, rounds: list[list[float]] = (),
                host_clock: bool = False) -> peer_lines.Lines | None:
    """peer_lines' noise line, and FAIL below max(noise, fail_share): a copy has no job to hold back, so the
    compute straggler line does not apply; a path a quarter slower than its identical peers is a worse path.
    rounds: each figure's repeated measurements (a CPU rank's turns), for the noise one figure carries;
    host_clock: timed by the host clock (HOST_CLOCK_FLOOR)."""
    base = peer_lines.derive(values, rounds=rounds, straggler=0.0,
                             floor=HOST_CLOCK_FLOOR if host_clock else (peer_lines.FLOOR, ""))
    if base is None:
        return None
    how = f"{base.how.split(';')[0]}; FAIL below max(noise, {fail_share:.0%})"
    return peer_lines.Lines(base.median, base.noise, max(base.noise, fail_share), base.n, how)


def _link_said(f: dict) -> str:
    """A GPU's host link beside its host copy: the most it can run at, and what it ran at where that differs."""
    gen, width = f.get("pcie_gen"), f.get("pcie_width")
    if f["kind"] not in HOST or not gen:
        return ""
    now = tuple(f.get("pcie_now") or ())
    ran = f" (running at Gen{now[0]} x{now[1]})" if len(now) == 2 and None not in now and now != (gen, width) \
        else ""
    return f" over PCIe Gen{gen} x{width or '?'}{ran}"


def judge(figures: list[dict], table: Table | None = None) -> list[Verdict]:
    """One verdict per figure: {"gpu", "model", "kind", "gbps"} and, for host copies, "pcie_gen" and "pcie_width"
    (the link's maximum: what it should run at), "pcie_now" ((gen, width) it trained to, shown beside it) or
    "link" ("nvlink-c2c"); "method" ("ce", "sm": a copy engine's
    and a kernel's copies are not peers) where it differs; "rounds" (its repeated measurements, the figure their
    best: a CPU rank's turns alone), whose spread widens the noise line; "clock": "host" where the host clock timed
    it (a CPU rank's copies: HOST_CLOCK_FLOOR). A figure of None is left out."""
    table = table or load()
    figs = [dict(f, gbps=f["gbps"] * COUNTED_ONCE.get(f["kind"], 1)) for f in figures if f.get("gbps")]
    groups: dict[tuple, list[dict]] = {}
    for f in figs:
        groups.setdefault(_peer_key(f), []).append(f)
    lines = {k: _peer_lines([f["gbps"] for f in fs], 1 - table.warn, [f.get("rounds") or [] for f in fs],
                            all(f.get("clock") == "host" for f in fs)) for k, fs in groups.items()}
    out = []
    for f in figs:
        peers = lines[_peer_key(f)]
        if peers is not None:
            by_peers, dev = peer_lines.judge(f["gbps"], peers)
            said_peers = (f"{dev:+.0%} against the median {peers.median:.2f} GB/s of {peers.n} peers (WARN below "
                          f"-{peers.noise:.0%}, FAIL below -{peers.fail:.0%})")
        else:
            by_peers, said_peers = "PASS", f"fewer than {peer_lines.MIN_PEERS} peers"
        ref = table.reference(f["kind"], f.get("model"), f.get("pcie_gen"), f.get("pcie_width"), f.get("link"))
        by_ref, said_ref = _by_reference(f["gbps"], ref, table)
        status = max(by_peers, by_ref, key=_ORDER.index)
        area = "host" if f["kind"] in HOST else "memory" if f["kind"] in MEMORY else None
        code = CODES.get((area or "host", status)) if status != "PASS" else None
        what = {"h2d": "H2D", "d2h": "D2H", "d2d": "D2D", "local": "D2D (device_local_copy x 2)"}.get(f["kind"],
                                                                                                     f["kind"])
        model = f" {f['model']}" if f.get("model") else ""
        out.append(Verdict(f["gpu"], f["kind"], f["gbps"], status, code,
                           f"{f['gpu']}{model}: {what} {f['gbps']:.2f} GB/s{_link_said(f)}, {said_peers}; {said_ref}",
                           ref, peers))
    return out
