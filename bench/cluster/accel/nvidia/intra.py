"""How a node's NVIDIA GPUs reach each other, as a kind, from `nvidia-smi topo -m` and `nvidia-smi nvlink -s`.

    from bench.cluster.accel import backend
    backend("nvidia").intra(gpus, topo, nvlink, pcie)     # {"kind": "nvswitch" | "nvlink" | "pcie" | "unknown", ...}

Two GPUs or more (bench.cluster.linkkind answers for none and one): nvswitch
(every GPU pair NVLinked with more links than a GPU has: through switches),
nvlink (direct NVLink: a full or partial mesh, a bridge), pcie (no NVLink
between the GPUs), unknown (the matrix could not be read). Moved here from
bench.cluster.linkkind, unchanged.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import combinations

from bench.cluster.accel.base import PCIE_PATHS, intra_result, slowest_pcie

# Compute capability major -> NVLink generation (Pascal P100 1, Volta 2, Ampere 3, Hopper 4, Blackwell 5).
NVLINK_GENERATION = {6: "NVLink1", 7: "NVLink2", 8: "NVLink3", 9: "NVLink4", 10: "NVLink5"}
# The most NVLinks one GPU has (H100, H200, B200: 18). A pair bonded by k links on n GPUs needs
# k*(n-1) links per GPU without a switch; more than the GPU has means the links go through NVSwitches.
MAX_NVLINKS = 18


def intra(gpus: list[dict], topo: dict | None, nvlink: dict | None, pcie: dict) -> dict:
    """The intra kind of two GPUs or more, from the parsed matrix, NVLink states and the GPUs' PCIe links."""
    n = len(gpus)
    names = [f"GPU{g['index']}" for g in gpus]
    links = (topo or {}).get("links") or {}
    if any(b not in links.get(a, {}) for a, b in combinations(names, 2)):
        why = (topo or {}).get("error") or ("nvidia-smi topo -m gave no matrix" if topo is None else
                                            "nvidia-smi topo -m lacks some of the GPUs")  # fmt: skip
        return intra_result("unknown", n, "the GPU matrix could not be read", why)
    cells = {(a, b): links[a][b] for a, b in combinations(names, 2)}
    nv = [int(c[2:]) for c in cells.values() if re.fullmatch(r"NV\d+", c)]
    slow = slowest_pcie(gpus, pcie)
    gen_pcie = f"PCIe Gen{slow['gen']} x{slow['width']}" if slow and slow["gen"] else None
    if not nv:
        worst = max(cells.values(), key=lambda c: list(PCIE_PATHS).index(c) if c in PCIE_PATHS else -1)
        return intra_result("pcie", n, f"{n} GPUs over PCIe, the farthest pair {worst} ({PCIE_PATHS.get(worst, '?')})",
                             f"nvidia-smi topo -m: no NV# between GPUs; pairs {sorted(set(cells.values()))}"
                             + (f"; sysfs: slowest GPU link {gen_pcie}" if gen_pcie else ""),
                             generation=gen_pcie, pcie=slow)  # fmt: skip
    ccs = [int(g["cc"].split(".")[0]) for g in gpus if g.get("cc")]
    generation = NVLINK_GENERATION.get(min(ccs)) if len(ccs) == n else None
    nvlink = nvlink or {}   # parse_nvlink_status's int keys, or a record's raw string keys
    active = [[ln["gbps"] for ln in nvlink.get(g["index"], nvlink.get(str(g["index"]), [])) if ln["gbps"]]
              for g in gpus]
    per_gpu = min(len(a) for a in active) if nvlink and all(active) else None
    rate = min(min(a) for a in active) if per_gpu else None
    extra = {"generation": generation, "links_per_gpu": per_gpu, "link_gbps": rate, "pcie": slow,
             "nv_pair_links": min(nv), "all_pairs": len(nv) == len(cells)}
    seen = f"; nvidia-smi nvlink -s: {per_gpu} active links per GPU at {rate:g} GB/s" if per_gpu else ""
    if len(nv) < len(cells):
        return intra_result("nvlink", n, f"{len(nv)} of {len(cells)} GPU pairs NVLinked, the others over PCIe",
                             f"nvidia-smi topo -m: {Counter(cells.values()).most_common()}{seen}", **extra)  # fmt: skip
    k = extra["nv_pair_links"]
    budget = per_gpu or MAX_NVLINKS
    # Peers on the whole node (the matrix), not only the GPUs given: 2 of 8 GPUs on NVSwitch are still switched.
    peers = sum(1 for d in (topo or {}).get("devices", []) if d.startswith("GPU")) - 1
    if k * peers > budget:
        has = f"the {budget} a GPU has" if per_gpu else f"the {budget} any GPU has"
        why = f"{k} links to each of {peers} peers is more than {has}"
        return intra_result("nvswitch", n, f"{n} GPUs, every pair NV{k} through NVSwitch ({why})",
                             f"nvidia-smi topo -m: every GPU pair NV{k}{seen}", **extra)  # fmt: skip
    return intra_result("nvlink", n, f"{n} GPUs, every pair NV{k} directly (a full mesh)",
                         f"nvidia-smi topo -m: every GPU pair NV{k}{seen}", **extra)  # fmt: skip
