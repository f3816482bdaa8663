"""What to drain: the nodes and GPUs the verdict failed, the --exclude string for the rest, and Slurm's drain.

    entries = drain_list(v.checks)        # [{"host", "gpu", "check", "reason"}], one per failed node/GPU and check
    exclude_spec(entries)                 # "node3@node1:1": DeepSpeed's --exclude for the rest
    hosts_of(entries)                     # ["node1", "node3"]: what --drain-file lists and --drain drains

Only rows that name a node or a GPU drain (a pair's row does not: its
nodes' rows carry the verdict after bisection; a cluster row does not).
A failed GPU is excluded alone (host:slot), but the scheduler drains its
node: Slurm drains nodes, not GPUs. bench never resumes a node.
"""

from __future__ import annotations

from typing import Any

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


def exclude_spec(entries: list[dict[str, Any]]) -> str:
    """Whole hosts where a node row failed, host:slot,slot where only GPUs did (DeepSpeed's --exclude)."""
    whole = [e["host"] for e in entries if e["gpu"] is None]
    gpus: dict[str, list[int]] = {}
    for e in entries:
        if e["gpu"] is not None and e["host"] not in whole:
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
    return (f"bench validate: {first['check']}{gpu}: {first['reason']}" +
            (f" (+{more} more failed check(s))" if more > 0 else ""))


def write_drain_file(path: str, entries: list[dict[str, Any]]) -> None:
    results.write_text_atomic(path, "".join(f"{h}\n" for h in hosts_of(entries)))


def drain_slurm(entries: list[dict[str, Any]], node_name: dict[str, str]) -> list[dict[str, Any]]:
    """scontrol update State=DRAIN for each host to drain, under its Slurm node name; what each answered."""
    done = []
    for host in hosts_of(entries):
        node = node_name.get(host, host)
        ok, said = slurm_drain(node, reason_of(entries, host))
        done.append({"host": host, "node": node, "drained": ok, "scontrol": said,
                     "reason": reason_of(entries, host)})
    return done
