"""The first link launch's passes over the level's pair rounds: a node is judged by its looks inside its leaf, the
fabric above the leaves by the looks across leaves; the latter's parts are steady and meet many pairs, so a level
may look at the pairs across leaves in fewer passes (Level.across_looks; docs/validate.md, "What the looks cost").
Pure: indices, no hosts."""

from __future__ import annotations


def passes(rounds: list[list[tuple[int, int]]], looks: int, across_looks: int | None = None,
           leaves: list[str | None] | None = None) -> list[list[tuple[int, int]]]:
    """The first launch's schedule: the rounds `looks` times over, the pairs across two leaf switches (both leaves
    known) only in the first `across_looks` passes (None: every pass). A node is judged by its looks inside its
    leaf; the looks across leaves are the fabric's, whose parts (a leaf's uplinks, an uplink, a path) are steady and
    meet many pairs, so fewer passes tell them (docs/validate.md, "What the looks cost"). Without leaves every pair
    is looked at `looks` times."""
    across_looks = looks if across_looks is None else min(across_looks, looks)

    def crosses(p: tuple[int, int]) -> bool:
        return bool(leaves) and leaves[p[0]] is not None and leaves[p[1]] is not None and leaves[p[0]] != leaves[p[1]]
    out = []
    for k in range(looks):
        for r in rounds:
            kept = r if k < across_looks else [p for p in r if not crosses(p)]
            if kept:
                out.append(kept)
    return out
