"""Performance references with tolerances, as ReFrame states them, for `bench validate`.

    table = load()                                    # bench/data/reference_throughput.json
    ref = table.throughput_for("Tesla T4", "fp32", "vit-b16-224", 64)
    judge(26.0, ref.value, ref.lower, ref.upper)      # ("PASS", -0.055)
    judge_relative(0.2e9, 1.0e9, table.busbw)         # ("FAIL", -0.8)
    table.link_for("intra", node)                     # LinkReference for a probed node, or None
    table.matmul_for("NVIDIA H200", "bf16")           # MatmulReference (794.5e12 FLOP/s), or None

A reference is a value plus tolerances as fractions of it (lower -0.3: down
to 30% below still passes; None: unbounded). Where no published figure fits
(CPU nodes, GPUs the table lacks, other models), nodes are judged against
the median of the cluster with the file's "relative" tolerances. Every
figure in the file carries its source. Link (busbw) and matmul references
and their scaling rules are bench.analysis.link_references.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

from bench.analysis.link_references import (
    LinkEntry,
    LinkReference,
    MatmulReference,
    link_for,
    matmul_for,
    parse_link_entries,
    parse_matmul,
)
from bench.core.capped import read_capped
from bench.core.errors import BadInput
from bench.core.gpus import normalise

__all__ = ["LinkReference", "MatmulReference", "Reference", "Relative", "STATUSES", "Table", "judge",
           "judge_relative", "load", "parse"]  # fmt: skip

STATUSES = ("PASS", "WARN", "FAIL", "ERROR", "SKIP")
MAX_TABLE_BYTES = 16 << 20  # the shipped table is a few KB; a --reference past this is a wrong path


@dataclass(frozen=True, slots=True)
class Reference:
    """One published single-GPU throughput and its tolerances."""

    gpu: str
    precision: str
    model: str
    micro_batch: int
    value: float            # images/s
    lower: float | None     # fraction below the value that still passes (e.g. -0.3)
    upper: float | None     # fraction above (None: unbounded)
    source: str


@dataclass(frozen=True, slots=True)
class Relative:
    """Tolerances for a figure judged against the cluster's median (fractions below it)."""

    warn_lower: float
    fail_lower: float
    floor: float | None = None   # an absolute minimum, same unit as the figure


@dataclass(frozen=True, slots=True)
class Table:
    path: str
    throughput: tuple[Reference, ...]
    relative: Relative
    busbw: Relative
    intra: tuple[LinkEntry, ...] = ()
    inter: tuple[LinkEntry, ...] = ()
    matmul: tuple[MatmulReference, ...] = ()

    def link_for(self, scope: str, node: dict, gpus_per_node: int | None = None) -> LinkReference | None:
        """The busbw expected of this node's intra- or inter-node links (None where nothing published fits)."""
        return link_for(self.intra, self.inter, scope, node, gpus_per_node)

    def matmul_for(self, gpu_name: str, dtype: str) -> MatmulReference | None:
        return matmul_for(self.matmul, gpu_name, dtype)

    def throughput_for(self, gpu: str, precision: str, model: str, micro_batch: int) -> Reference | None:
        key = normalise(gpu)
        for r in self.throughput:
            if (normalise(r.gpu) == key and r.precision == precision and r.model == model
                    and r.micro_batch == micro_batch):
                return r
        return None


def _fraction(v, where: str) -> float | None:
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise BadInput(f"{where}: must be a number or null, got {v!r}")
    return float(v)


def _relative(d, where: str) -> Relative:
    if not isinstance(d, dict):
        raise BadInput(f"{where}: must be an object with warn_lower and fail_lower")
    try:
        warn, fail = _fraction(d["warn_lower"], f"{where}.warn_lower"), _fraction(d["fail_lower"], f"{where}.fail_lower")
    except KeyError as e:
        raise BadInput(f"{where}: missing {e.args[0]}") from None
    if warn is None or fail is None or not -1 <= fail <= warn <= 0:
        raise BadInput(f"{where}: need -1 <= fail_lower <= warn_lower <= 0, got {fail} and {warn}")
    return Relative(warn, fail, _fraction(d.get("floor_bytes_per_s"), f"{where}.floor_bytes_per_s"))


def parse(text: str, path: str) -> Table:
    """The table in `text` (JSON); BadInput naming the file and the entry for anything wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: must hold a JSON object")
    refs = []
    for i, e in enumerate(raw.get("throughput", [])):
        where = f"{path}: throughput[{i}]"
        try:
            refs.append(Reference(gpu=str(e["gpu"]), precision=str(e["precision"]), model=str(e["model"]),
                                  micro_batch=int(e["micro_batch"]), value=float(e["images_per_s"]),
                                  lower=_fraction(e.get("lower"), f"{where}.lower"),
                                  upper=_fraction(e.get("upper"), f"{where}.upper"), source=str(e["source"])))
        except (KeyError, TypeError, ValueError) as err:
            raise BadInput(f"{where}: missing or bad field ({err})") from None
        if not refs[-1].value > 0:
            raise BadInput(f"{where}: images_per_s must be > 0")
    default = {"warn_lower": -0.35, "fail_lower": -0.65}
    return Table(path, tuple(refs), _relative(raw.get("relative", default), f"{path}: relative"),
                 _relative(raw.get("busbw", default), f"{path}: busbw"), parse_link_entries(raw, path, "intra"),
                 parse_link_entries(raw, path, "inter"), parse_matmul(raw, path))  # fmt: skip


def load(path: str | None = None) -> Table:
    """The shipped table, or the user's --reference FILE."""
    if path is None:
        text = resources.files("bench").joinpath("data/reference_throughput.json").read_text("utf-8")
        return parse(text, "bench/data/reference_throughput.json")
    data = read_capped(path, MAX_TABLE_BYTES, "--reference", "a reference table")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"--reference: {path} is not UTF-8 text (a binary file?)") from None
    return parse(text, path)


def judge(value: float, ref: float, lower: float | None, upper: float | None) -> tuple[str, float]:
    """ReFrame's check: PASS when ref*(1+lower) <= value <= ref*(1+upper); (status, deviation)."""
    deviation = value / ref - 1
    if lower is not None and deviation < lower:
        return "FAIL", deviation
    if upper is not None and deviation > upper:
        return "FAIL", deviation
    return "PASS", deviation


def judge_relative(value: float, median: float, tol: Relative) -> tuple[str, float]:
    """A figure over the cluster's median: FAIL below fail_lower (or the floor), WARN below warn_lower."""
    deviation = value / median - 1 if median > 0 else 0.0
    if (tol.floor is not None and value < tol.floor) or deviation < tol.fail_lower:
        return "FAIL", deviation
    if deviation < tol.warn_lower:
        return "WARN", deviation
    return "PASS", deviation
