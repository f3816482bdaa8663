"""GPU models -> compute capability, memory and peak TFLOP/s, from one table.

    from bench.core.gpus import lookup, peak_tflops, supports
    spec = lookup("NVIDIA A100-SXM...", memory_mib=81920)   # a name the vendor's table cut
    spec.name, spec.cc, peak_tflops(spec, "bf16")            # 'NVIDIA A100-SXM4-80GB', '8.0', 312.0
    supports("6.1", "fp16")                                  # False: see supports()

The numbers live in bench/data/gpu_specs.json (NVIDIA's) and
bench/data/amd_gpu_specs.json (AMD Instinct's, found by the model token the
name holds: "AMD Instinct MI300X OAM" is the MI300X; lookup_amd), each entry
with its datasheet; no peak figure is written anywhere else in the code.
lookup() asks both, so MFU (bench.analysis.figures, by the name torch gives
a rank's device) and the hetero verdict know an MI300X's peak as an H100's.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

from bench.core.precision import PRECISIONS

# The vendor tool's default table cuts a long name and ends it with "..."
# ("NVIDIA A100-SXM...", "NVIDIA GeForce ..."): the rest is a prefix.
_TRUNCATED = "..."
# Datasheet GB vs what the driver reports in MiB: a 16 GB T4 shows 15360 or
# 15109 MiB (ECC on), an 8 GB P4 7611 MiB, a 141 GB H200 143771 MiB.
_MEMORY_TOLERANCE = 0.12

# Why fp16 is gated at sm_70 and not at sm_60 where the hardware has fp16:
# Pascal has no tensor cores; sm_61 parts (GTX 10xx, Tesla P4/P40) do fp16
# arithmetic at 1/64 of the fp32 rate, so mixed precision runs slower than
# fp32, and the study's DeepSpeed fp16 runs failed on its GTX 1070 and Tesla
# P4. P100 (sm_60) does fp16 at 2x fp32 but without tensor cores. (The default
# image's torch, cu130, ships no Pascal kernels at all; the pascal variant's
# torch 2.7.1+cu126 does: bench.cluster.variants.) So "supports"
# means "worth training in": tensor-core fp16 from Volta (sm_70).
_MIN_CC = {"fp32": (3, 0), "fp16": (7, 0), "bf16": (8, 0)}
WHY_UNSUPPORTED = {
    "fp16": "fp16 training needs tensor cores, sm_70+ (Volta or newer); Pascal runs it slower than fp32 "
    "or not at all, and the study's fp16 runs failed on GTX 1070 and Tesla P4",
    "bf16": "bf16 needs sm_80+ (Ampere or newer: no bf16 arithmetic before it; Pascal has no tensor cores at all)",
}


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model's datasheet figures; TFLOP/s are dense peaks (see the JSON's _about)."""

    name: str
    arch: str
    cc: str
    memory_gb: float
    fp32_tflops: float
    fp16_tflops: float | None
    bf16_tflops: float | None
    source: str
    aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "name": self.name, "arch": self.arch, "cc": self.cc, "memory_gb": self.memory_gb,
            "fp32_tflops": self.fp32_tflops, "fp16_tflops": self.fp16_tflops,
            "bf16_tflops": self.bf16_tflops, "source": self.source,
        }  # fmt: skip


def normalise(name: str) -> str:
    """Case-folded, single-spaced, without the 'NVIDIA ' prefix newer drivers add."""
    text = " ".join(name.split()).casefold()
    return text[len("nvidia ") :] if text.startswith("nvidia ") else text


@functools.cache
def table() -> tuple[GpuSpec, ...]:
    """All entries of bench/data/gpu_specs.json, in file order."""
    raw = json.loads(resources.files("bench").joinpath("data/gpu_specs.json").read_text("utf-8"))
    specs = []
    for e in raw["gpus"]:
        specs.append(GpuSpec(
            name=e["name"], arch=e["arch"], cc=e["cc"], memory_gb=float(e["memory_gb"]),
            fp32_tflops=float(e["fp32_tflops"]), fp16_tflops=e["fp16_tflops"],
            bf16_tflops=e["bf16_tflops"], source=e["source"], aliases=tuple(e.get("aliases", ())),
        ))  # fmt: skip
    return tuple(specs)


@functools.cache
def _by_name() -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    for spec in table():
        for n in (spec.name, *spec.aliases):
            out[normalise(n)] = spec
    return out


def _memory_matches(spec: GpuSpec, memory_mib: float) -> bool:
    gib = memory_mib / 1024
    return abs(gib - spec.memory_gb) <= _MEMORY_TOLERANCE * spec.memory_gb


def is_truncated(name: str) -> bool:
    return name.rstrip().endswith(_TRUNCATED)


def candidates(name: str, memory_mib: float | None = None) -> list[GpuSpec]:
    """Every table entry `name` may denote: one for a full name, several for a cut one.

    With memory_mib, entries whose datasheet memory is far from it are dropped.
    """
    key = normalise(name)
    if is_truncated(name):
        prefix = key[: -len(_TRUNCATED)].rstrip()
        found = {s.name: s for n, s in _by_name().items() if prefix and n.startswith(prefix)}
        specs = list(found.values())
    else:
        spec = _by_name().get(key)
        specs = [spec] if spec else []
    if memory_mib is not None:
        specs = [s for s in specs if _memory_matches(s, memory_mib)]
    return specs


def lookup(name: str, memory_mib: float | None = None) -> GpuSpec | None:
    """The table entry for a GPU name as the vendor's tool, its library or torch print it, or None.

    A name cut by the tool's table ("NVIDIA A100-SXM...") resolves only when one
    entry fits it and, if given, its memory; "NVIDIA GeForce ..." with 8 GB
    fits a GTX 1070 as well as an RTX 3070, so it stays None rather than a
    guess (the probe asks the library or the tool's query for the full name).
    A name no NVIDIA entry has is looked up among AMD's (lookup_amd).
    """
    found = candidates(name, memory_mib)
    return found[0] if len(found) == 1 else None if found else lookup_amd(name)


_AMD_MODEL = re.compile(r"\bMI\d{3}[A-Z]?\b", re.I)


@functools.cache
def amd_table() -> dict[str, GpuSpec]:
    """bench/data/amd_gpu_specs.json's entries by model token ("MI300X"); the gfx target in `cc`'s place."""
    raw = json.loads(resources.files("bench").joinpath("data/amd_gpu_specs.json").read_text("utf-8"))
    out = {}
    for e in raw["gpus"]:
        spec = GpuSpec(name=e["name"], arch=e["arch"], cc=e["gfx"], memory_gb=float(e["memory_gb"]),
                       fp32_tflops=float(e["fp32_tflops"]), fp16_tflops=e["fp16_tflops"],
                       bf16_tflops=e["bf16_tflops"], source=e["source"], aliases=tuple(e["aliases"]))  # fmt: skip
        out[_AMD_MODEL.search(e["name"]).group(0).upper()] = spec
    return out


def lookup_amd(name: str | None) -> GpuSpec | None:
    """The first model token of the name that AMD's table has ("Aldebaran/MI200 [Instinct MI250X/MI250]": MI250X);
    None for a model it lacks (MI100, MI300A, MI308X, MI350X)."""
    return next((amd_table()[m.upper()] for m in _AMD_MODEL.findall(name or "") if m.upper() in amd_table()), None)


def parse_cc(cc: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """'8.6' or (8, 6) -> (8, 6); None or junk -> None."""
    if cc is None:
        return None
    if isinstance(cc, tuple):
        return (int(cc[0]), int(cc[1]))
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(cc))
    return (int(m.group(1)), int(m.group(2))) if m else None


def supports(cc: str | tuple[int, int] | None, precision: str) -> bool:
    """Whether a GPU of compute capability `cc` should train in `precision`.

    fp32 everywhere; fp16 from sm_70 (see _MIN_CC for why not sm_60); bf16
    from sm_80. An AMD gfx target ("gfx942") supports what AMD's table gives
    it a peak for. An unknown cc supports nothing but fp32.
    """
    if precision not in _MIN_CC:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    if isinstance(cc, str) and cc.strip().lower().startswith("gfx"):
        # An AMD gfx target: the precisions its entry in AMD's table has a peak for (fp32 alone where none has it).
        return precision == "fp32" or any(s.cc == cc.strip().lower() and peak_tflops(s, precision)
                                          for s in amd_table().values())
    parsed = parse_cc(cc)
    if parsed is None:
        return precision == "fp32"
    return parsed >= _MIN_CC[precision]


def peak_tflops(spec: GpuSpec, precision: str = "fp32") -> float | None:
    """Dense peak for the math that precision trains with; None where the card has no such unit."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    return {"fp32": spec.fp32_tflops, "fp16": spec.fp16_tflops, "bf16": spec.bf16_tflops}[precision]
