"""The inter-node check: node pairs in rounds of disjoint pairs, bisection to the node; in the link launch."""

from __future__ import annotations

from bench.validate import pairing  # pure: rounds of node pairs
from bench.validate.checks import launches
from bench.validate.checks.base import Check, Row, NODES_AND_CLUSTER


def _plan(p) -> None:
    if p.wanted("intra-node"):
        p.none("inter-node", "measured in the intra-node launch; a second look only where a pair fell short",
               looks=1)
    else:
        launches.links_launch(p, "inter-node")
    lv, rounds, leaves, nodes = p.lv, p.rounds, p.leaves, p.nodes
    # The second look at its largest: a node in doubt's every pair and two good partners, again_looks times each.
    most = max((len(x) for x in pairing.partners(rounds).values()), default=0) + 2 * (nodes > 3)
    again = most * (lv.again_looks or lv.pair_looks) * p.cfg.repeats
    p.stages[-1].update(again_rounds=again, again_s=round(p.start + p.ranks * p.c["rendezvous_per_rank_s"]
                                                          + p.pair_s * again, 1))
    stage_pairs = sum(len(r) for r in rounds)
    crossing = sum(1 for r in rounds for a, b in r if leaves and leaves[a] != leaves[b])
    p.stages[-1].update(pairs=stage_pairs, pairing=pairing.describe(lv.pairs, nodes, lv.matchings, leaves)
                        + (f"; {crossing} of {stage_pairs} pairs across leaf switches" if leaves else "")
                        + f"; the ring's order: {pairing.describe_order(lv.pairs, nodes, leaves, p.cfg.pairs_seed)}",
                        seed=p.cfg.pairs_seed,
                        partners=min((len(x) for x in pairing.partners(rounds).values()), default=0))


CHECK = Check(
    name="inter-node",
    launch=launches.LINKS,
    runs="bench.validate.pairs:inter_node",
    skip=NODES_AND_CLUSTER,
    plan=_plan,
    action="drain: the node reaches the others slower than its peers; check its NIC, cable and switch port",
    what=('node pairs, the pairs of a round at once (ring pairs at `quick`, every pair there up to 48 nodes without a topology; every pair at `full`, two looks at'
          " each, one across leaves; with a topology each leaf's own ring too), then every pair that fell short "
          'again and each node blamed or in doubt against two good ones (four looks each at `full`); in the '
          'same launch as intra-node'),
    judged=("each look: the published busbw per NIC rate inside a leaf (with the looks' noise), else lines from "
            'the pairs across leaves (their fastest mode, or the fabric\'s design: --oversubscription, '
            "ibnetdiscover's ports); the floor. A node by a likelihood-ratio test on its looks inside its leaf "
            '(below)'),
    rows=(Row(
        name="fabric",
        what=('with a topology of three leaf switches or more: each leaf by its pairs across leaves (from the '
              'inter-node launch)'),
        judged=("the looks across leaves fitted by parts: a leaf's uplinks, one uplink's nodes, a leaf pair's "
                'path, the fabric above the leaves (a spine); their nodes held, not drained (below)')),),)
