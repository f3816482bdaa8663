"""A node's provenance as the store keeps it, from its inventory (bench.cluster.probe's node_inventory).

    of_inventory(inv)   # {"driver", "cuda", "image", "kernel", "firmware", "torch", "bench"}: None where unknown

firmware is the GPUs' VBIOS versions, where the inventory read them (one
value, or the distinct ones joined with "/"); kernel is the node's uname
release. The validate record carries them per node (nodes_provenance), so a
store filled later by `bench history import` knows them too.
"""

from __future__ import annotations

FIELDS = ("driver", "cuda", "image", "kernel", "firmware", "torch", "bench")


def of_inventory(inv: dict | None) -> dict[str, str | None]:
    if not inv:
        return {}
    vbios = sorted({str(g.get("vbios")) for g in inv.get("gpus") or [] if g.get("vbios")})
    versions = inv.get("versions") or {}
    return {"driver": inv.get("driver_version"), "cuda": inv.get("cuda_driver_version"), "image": inv.get("image"),
            "kernel": inv.get("kernel"), "firmware": "/".join(vbios) or None, "torch": versions.get("torch"),
            "bench": versions.get("bench")}


def of_nodes(inventory: dict[str, dict]) -> dict[str, dict]:
    """Every inventoried node's provenance (the record's nodes_provenance)."""
    return {h: of_inventory(inv) for h, inv in (inventory or {}).items() if inv}
