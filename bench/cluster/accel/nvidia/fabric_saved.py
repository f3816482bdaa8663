"""A saved report folder's NVLink-fabric files beside nvidia-smi -q: gpud-fabric.txt and nvidia-imex-ctl.txt.

    from bench.cluster.accel.nvidia.fabric_saved import gpud, imex_ctl
    gpud(report, "node7/gpud-fabric.txt", read_text)        # gpud's fabric-manager state (JSON, whole or cut) or
                                                            # `gpud scan`'s table: NVML's fabric info per GPU
    imex_ctl(report, "node7/nvidia-imex-ctl.txt", read_text)  # `nvidia-imex-ctl -N`, saved where the site uses IMEX

gpud's reading is used where nvidia-smi -q's Fabric section was not read
(the report's "fabric" is then gpud's); IMEX is judged where the node's GPUs
are in a multi-node NVLink domain, or where no fabric was saved beside it
(bench.cluster.accel.nvidia.imex).
"""

from __future__ import annotations

import os
from typing import Callable

from bench.cluster.accel.nvidia import fabric_state, imex
from bench.core.errors import BadInput


def gpud(r, path: str, read_text: Callable[[str], str]) -> None:
    gpus, about = fabric_state.from_gpud(read_text(path))
    if not gpus and not about:
        raise BadInput(f"{path}: neither gpud's fabric-manager state nor its fabric table")
    if r.fabric:
        r.read_ok("gpud fabric", f"{len(gpus)} GPU(s), not used: nvidia-smi -q's fabric section was read")
        return
    fabric_state.to_report(r, gpus, "gpud", about)
    if not any(g.state for g in gpus):
        r.read_ok("fabric", f"gpud: {len(gpus)} GPU(s), none with a fabric state (Not Supported, or cut before "
                            f"its fabric_states): {about.get('health', '')} {about.get('reason', '')}".strip())


def imex_ctl(r, path: str, read_text: Callable[[str], str]) -> None:
    state = imex.parse(read_text(path))
    if not state.nodes and state.domain_state is None:
        raise BadInput(f"{path}: no 'Node #N' line or 'Domain State': not `nvidia-imex-ctl -N` output")
    found, said = imex.findings(state, r.fabric if r.fabric else None)
    r.add(found)
    r.read_ok("imex", said)
