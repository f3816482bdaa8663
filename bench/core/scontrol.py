"""The scontrol line that drains a node, and the reason bench gives Slurm: one place, for the drain itself
(bench.cluster.slurm runs it) and for the page that shows it to copy (bench.render.html).

    drain_argv("node3", "bench validate: numerics (GPU 0): ...")   # ["scontrol", "update", "NodeName=node3", ...]
    drain_reason(entries, "node3")    # the host's first failed check and why, as bench.validate.drain gives it
"""

from __future__ import annotations

from typing import Any

# Slurm keeps a node's reason in a fixed-size field; a reason longer than this is cut (with "...").
REASON_MAX = 200
# The prefix of every reason bench writes: --undrain returns to service only the nodes it drained itself (NHC's
# rule: a node someone drained by hand, or another tool, stays drained).
REASON_PREFIX = "bench validate:"


def drain_argv(node: str, reason: str) -> list[str]:
    """The scontrol command that drains `node` with `reason` (an argument list: no shell sees the reason)."""
    text = " ".join(reason.split())
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 3] + "..."
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"]


def drain_reason(entries: list[dict[str, Any]], host: str) -> str:
    """One line for the scheduler: the host's first failed check and why (with the GPU where it is one); entries are
    a validate record's "drain" list."""
    first = next(e for e in entries if e["host"] == host)
    gpu = f" (GPU {first['gpu']})" if first["gpu"] is not None else ""
    more = len({(e["check"], e["gpu"]) for e in entries if e["host"] == host}) - 1
    return (f"{REASON_PREFIX} {first['check']}{gpu}: {first['reason']}" +
            (f" (+{more} more failed check(s))" if more > 0 else ""))
