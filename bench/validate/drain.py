"""What to drain: the nodes and GPUs the verdict failed, the --exclude string for the rest, and Slurm's drain.

    entries = drain_list(v.checks)        # [{"host", "gpu", "check", "reason"}], one per failed node/GPU and check
    exclude_spec(entries)                 # "node3@node1:1": DeepSpeed's --exclude for the rest
    hosts_of(entries)                     # ["node1", "node3"]: what --drain-file lists and --drain drains
    breaker(entries, limit=2, nodes=100, leaf_of=...)  # None, or what is held: drains concentrated on one leaf
                                                       # switch, or more than --max-drain nodes at once

Only rows that name a node or a GPU drain (a pair's row does not: its
nodes' rows carry the verdict after bisection; a cluster row does not).
A failed GPU is excluded alone (host:slot), but the scheduler drains its
node: Slurm drains nodes, not GPUs. Every reason bench writes starts with
"bench validate:"; --undrain returns to service only such nodes, and only
when they are healthy now (NHC's rule): a node drained by a person or
another tool stays drained. From a Slurm Prolog bench calls no scontrol:
the Prolog's exit status drains the node, and scontrol would wait on
slurmctld inside the Prolog's time.
"""

from __future__ import annotations

from typing import Any

from bench.cluster.slurm import REASON_PREFIX, in_prolog, resume
from bench.cluster.slurm import drain as slurm_drain
from bench.core import results
from bench.validate.state import Check


def drain_list(checks: list[Check]) -> list[dict[str, Any]]:
    out, seen = [], set()
    for c in checks:
        if c.status != "FAIL" or c.host is None:
            continue
        key = (c.host, c.gpu, c.check)
        if key not in seen:
            seen.add(key)
            out.append({"host": c.host, "gpu": c.gpu, "check": c.check, "reason": c.reason})
    return out


def exclude_spec(entries: list[dict[str, Any]], unknown: list[str] = ()) -> str:
    """Whole hosts where a node row failed or the node is unknown, host:slot,slot where only GPUs failed
    (DeepSpeed's --exclude): what a run leaves out to use only what validate found good."""
    whole = [e["host"] for e in entries if e["gpu"] is None] + list(unknown)
    out = set(whole)  # `in` on the list was a scan per entry: N^2 when many nodes fail
    gpus: dict[str, list[int]] = {}
    for e in entries:
        if e["gpu"] is not None and e["host"] not in out:
            gpus.setdefault(e["host"], [])
            if e["gpu"] not in gpus[e["host"]]:
                gpus[e["host"]].append(e["gpu"])
    parts = list(dict.fromkeys(whole)) + [f"{h}:{','.join(map(str, sorted(s)))}" for h, s in gpus.items()]
    return "@".join(parts)


def hosts_of(entries: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(e["host"] for e in entries))


def reason_of(entries: list[dict[str, Any]], host: str) -> str:
    """One line for the scheduler: the host's first failed check and why (with the GPU where it is one)."""
    first = next(e for e in entries if e["host"] == host)
    gpu = f" (GPU {first['gpu']})" if first["gpu"] is not None else ""
    more = len({(e["check"], e["gpu"]) for e in entries if e["host"] == host}) - 1
    return (f"{REASON_PREFIX} {first['check']}{gpu}: {first['reason']}" +
            (f" (+{more} more failed check(s))" if more > 0 else ""))


# Drains on one leaf switch of at least this share of its nodes (and at least LEAF_MIN of them) are the switch's, or
# what its nodes share (power, cooling, a PDU), more often than that many bad nodes at once. At least half, not more:
# when every pair inside a leaf is slow, bench.validate.blame names every other node of the leaf's ring (each
# explains both its pairs), exactly half of an even leaf.
LEAF_SHARE, LEAF_MIN = 0.5, 4


def breaker(entries: list[dict[str, Any]], limit: int | None, nodes: int, leaf_of: dict[str, str | None] | None = None,
            earlier: list[str] = ()) -> dict[str, Any] | None:
    """The circuit breaker (Azure's cluster-health-monitor, NVSentinel), by shape as well as size: drains concentrated
    on one leaf switch (at least LEAF_SHARE of the nodes it holds here, and LEAF_MIN) are held and named as that
    leaf whatever --max-drain says; past `limit` nodes at once (counting `earlier`: a soak's drains of earlier
    rounds) every drain is held, since that many is more often the fabric, the launcher or bench than bad nodes.
    None when nothing is held."""
    hosts = hosts_of(entries)
    leaves: dict[str, list[str]] = {}
    if leaf_of:
        size: dict[str, int] = {}
        for leaf in leaf_of.values():
            if leaf is not None:
                size[leaf] = size.get(leaf, 0) + 1
        on: dict[str, list[str]] = {}
        for h in hosts:
            if leaf_of.get(h) is not None:
                on.setdefault(leaf_of[h], []).append(h)
        leaves = {leaf: hs for leaf, hs in on.items() if len(hs) >= LEAF_MIN and len(hs) >= LEAF_SHARE * size[leaf]}
    by_leaf = {h for hs in leaves.values() for h in hs}
    rest = [h for h in hosts if h not in by_leaf]
    over = limit is not None and len(set(earlier) | set(rest)) > limit
    if not leaves and not over:
        return None
    why = [f"{len(hs)} of the {size[leaf]} nodes on leaf switch {leaf} would drain at once: more likely the switch or "
           f"what its nodes share (power, cooling, a PDU) than {len(hs)} bad nodes; held, not drained (check {leaf}, "
           "then drain by hand)" for leaf, hs in leaves.items()]
    if over:
        count = len(set(earlier) | set(rest))
        why.append(f"{count} of {nodes} nodes would drain" + (f" ({len(set(earlier))} in earlier rounds)" if earlier
                                                                 else " at once") +
                   f", over --max-drain {limit}: the cause may be the fabric, the launcher or bench rather than the "
                   "nodes; none drained (check what they share, then drain by hand, or rerun with --max-drain all)")
    return {"held": hosts if over else [h for h in hosts if h in by_leaf], "limit": limit, "nodes": nodes,
            "leaves": leaves, "reason": "; ".join(why)}


def write_drain_file(path: str, entries: list[dict[str, Any]], held: dict[str, Any] | None = None) -> None:
    """One host a line; a host held by the breaker is a comment that says so (a script draining each line drains
    only the rest, a person reads which and why)."""
    kept = set(held["held"]) if held else set()
    head = f"# held: {held['reason']}\n" if held else ""
    results.write_text_atomic(path, head + "".join(f"# held {h}\n" if h in kept else f"{h}\n"
                                                   for h in hosts_of(entries)))


def drain_slurm(entries: list[dict[str, Any]], node_name: dict[str, str]) -> list[dict[str, Any]]:
    """scontrol update State=DRAIN for each host to drain, under its Slurm node name; what each answered."""
    if in_prolog():
        return [{"host": h, "node": node_name.get(h, h), "drained": False, "reason": reason_of(entries, h),
                 "scontrol": "not called from a Prolog/Epilog: its exit status drains the node"}
                for h in hosts_of(entries)]
    done = []
    for host in hosts_of(entries):
        node = node_name.get(host, host)
        ok, said = slurm_drain(node, reason_of(entries, host))
        done.append({"host": host, "node": node, "drained": ok, "scontrol": said,
                     "reason": reason_of(entries, host)})
    return done


def resume_slurm(nodes: dict[str, dict[str, Any]], node_name: dict[str, str], checked: list[str]) -> list[dict[str, Any]]:
    """Every node healthy now that bench drained earlier, returned to service (bench.cluster.slurm.resume), where
    this run checked what drained it: a node drained for its throughput is not returned by a health check that
    did not measure it (its drain reason names the check: REASON_PREFIX + " <check>...")."""
    if in_prolog():
        return []
    done = []
    for h, n in nodes.items():
        if n["verdict"] == "healthy":
            done.append({"host": h, **resume(node_name.get(h, h), checked=checked)})
    return done
