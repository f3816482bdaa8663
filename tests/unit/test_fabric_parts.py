"""bench.validate.above and blame on hand-made looks: which family of parts explains the short looks across leaves,
and the likelihood-ratio test that blames a node (pure: names and statuses, no fixtures)."""

from __future__ import annotations

import itertools

from bench.validate import above, blame

LEAVES = [f"leaf{k}" for k in range(6)]
NODES = {leaf: [f"{leaf}n{i}" for i in range(4)] for leaf in LEAVES}


def _looks(short) -> list[above.Cross]:
    """Every node with every node of every other leaf, two looks each; short(a, b, la, lb): both looks short."""
    out = []
    for la, lb in itertools.combinations(LEAVES, 2):
        for a in NODES[la]:
            for b in NODES[lb]:
                bad = short(a, b, la, lb)
                out.append(above.Cross(a, b, la, lb, 2, 2 * bad, 2 * bad))
    return out


def _found(looks) -> set[tuple[str, object]]:
    return {(p.kind, p.key) for p in above.explain(looks)}


def test_a_leaf_whose_every_look_is_short_is_its_uplinks():
    assert _found(_looks(lambda a, b, la, lb: "leaf2" in (la, lb))) == {("leaf", "leaf2")}


def test_one_uplink_is_the_nodes_behind_it_not_their_leaf():
    behind = {"leaf2n0", "leaf2n1"}
    assert _found(_looks(lambda a, b, la, lb: bool({a, b} & behind))) == {("up", h) for h in behind}


def test_a_slow_path_is_its_leaf_pair_and_a_spine_many_of_them():
    assert _found(_looks(lambda a, b, la, lb: {la, lb} == {"leaf1", "leaf4"})) == {
        ("pair", frozenset(("leaf1", "leaf4")))}
    slow = {frozenset(p) for i, p in enumerate(itertools.combinations(LEAVES, 2)) if i % 2}  # every other pair
    got = _found(_looks(lambda a, b, la, lb: frozenset((la, lb)) in slow))
    assert got == {("pair", p) for p in slow}, "no leaf nor node is short whatever the partner"


def test_a_healthy_fabric_has_no_part_and_one_short_look_names_none():
    assert above.explain(_looks(lambda a, b, la, lb: False)) == []
    looks = _looks(lambda a, b, la, lb: False)
    looks[0] = above.Cross(looks[0].a, looks[0].b, looks[0].la, looks[0].lb, 2, 1, 1)
    assert above.explain(looks) == [], "one short look is within the stated error rate"


def test_a_node_is_blamed_by_its_evidence_not_its_share_alone():
    # 2 short looks of 2 beats the 1,000 likelihood ratio; 1 of 2 does not; 8 of 8 outweighs 40 of 200
    assert blame.evidence(2, 2) >= blame.EVIDENCE > blame.evidence(1, 2)
    assert blame.evidence(8, 8) > blame.evidence(3, 8) >= 0 > blame.evidence(1, 8)
    looks = [blame.Look(("bad", f"p{i}"), "FAIL") for i in range(4)] + \
        [blame.Look((f"p{i}", f"q{i}"), "PASS") for i in range(4)]
    shares = blame.peel(looks, order=["p0", "bad"] + [f"p{i}" for i in range(1, 4)] + [f"q{i}" for i in range(4)])
    assert shares["bad"].blamed == 1 and all(shares[f"p{i}"].blamed is None for i in range(4))
