"""What to drain: the nodes and GPUs the verdict failed, the --exclude string for the rest, and Slurm's drain.

    entries = drain_list(v.checks)        # [{"host", "gpu", "check", "reason"}], one per failed node/GPU and check
    exclude_spec(entries)                 # "node3@node1:1": DeepSpeed's --exclude for the rest
    hosts_of(entries)                     # ["node1", "node3"]: what --drain-file lists and --drain drains
    breaker(entries, limit=2, nodes=100)  # None, or what is held: more than --max-drain nodes at once

Only rows that name a node or a GPU drain (a pair's row does not: its
nodes' rows carry the verdict after bisection; a cluster row does not).
A failed GPU is excluded alone (host:slot), but the scheduler drains its
node: Slurm drains nodes, not GPUs. Every reason bench writes starts with
"bench validate:"; --resume returns to service only such nodes, and only
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


def breaker(entries: list[dict[str, Any]], limit: int | None, nodes: int) -> dict[str, Any] | None:
    """The circuit breaker (Azure's cluster-health-monitor, NVSentinel): more nodes to drain at once than
    `limit` (--max-drain) is more often the fabric, the launcher or bench than that many bad nodes, so bench
    drains none of them itself. None when within the limit (or no limit)."""
    hosts = hosts_of(entries)
    if limit is None or len(hosts) <= limit:
        return None
    return {"held": hosts, "limit": limit, "nodes": nodes,
            "reason": f"{len(hosts)} of {nodes} nodes would drain at once, over --max-drain {limit}: the cause may "
                      "be the fabric, the launcher or bench rather than the nodes; none drained (check what they "
                      "share, then drain by hand, or rerun with --max-drain all)"}


def write_drain_file(path: str, entries: list[dict[str, Any]], held: dict[str, Any] | None = None) -> None:
    """One host a line; held by the breaker, every line a comment that says so (a script draining each line
    drains nothing, a person reads which and why)."""
    if held is None:
        results.write_text_atomic(path, "".join(f"{h}\n" for h in hosts_of(entries)))
        return
    results.write_text_atomic(path, f"# held: {held['reason']}\n" + "".join(f"# held {h}\n" for h in held["held"]))


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
