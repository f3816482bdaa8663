"""bench probe's table: nodes x GPUs, and the heterogeneity verdict, from the same dicts --json prints."""

from __future__ import annotations

from bench.core.gpus import supports


def _yes(flag: bool | None) -> str:
    return "?" if flag is None else ("yes" if flag else "NO")


def render(nodes: list[dict], unreachable: dict[str, str], v: dict) -> None:
    """Nodes x GPUs table and the verdict, from the same dicts --json prints."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"bench probe: {len(nodes)} node(s), {v['gpus']} GPU(s)"), title_justify="left")
    for col in ("host", "GPU", "model", "memory", "CC", "driver", "torch has it", "fp16", "bf16"):
        table.add_column(col, justify="right" if col in ("GPU", "memory") else "left")
    for inv in nodes:
        host = inv.get("host", "?")
        if not inv.get("gpus"):
            table.add_row(Text(host), "-", "no GPU", "", "", "", "", "", "")
        for g in inv.get("gpus") or []:
            used = inv.get("slots") is None or g.get("index") in inv["slots"]
            table.add_row(
                Text(host), str(g.get("index")) + ("" if used else " (not in slots)"),
                Text(g.get("model") or f"{g.get('name')} (not in table)"),
                f"{g['memory_mib']} MiB" if g.get("memory_mib") else "?",
                Text((g.get("cc") or "?") + (" (table)" if g.get("cc_source") == "table" else "")),
                Text(inv.get("driver_version") or "?"), _yes(g.get("torch_built_for")),
                _yes(supports(g.get("cc"), "fp16")), _yes(supports(g.get("cc"), "bf16")),
            )  # fmt: skip
    for host, why in unreachable.items():
        table.add_row(Text(host), "-", "NOT PROBED", "", "", "", "", "", "")
    console = Console()
    console.print(table)
    for inv in nodes:
        if not inv.get("gpus"):
            console.print(Text(f"[{inv.get('host')}] no GPU: {inv.get('gpu_error') or 'none found'}"))
    head = f"verdict: {v['level'].upper()}, " + ("uniform" if v["uniform"] else "heterogeneous")
    head += f"; precisions every node supports: {', '.join(v['precisions']) or 'none'}"
    console.print(Text(head, style={"ok": "green", "warn": "yellow", "fail": "bold red"}[v["level"]]))
    for f in v["findings"]:
        console.print(Text(f"  {f['level'].upper():4} {f['code']} [{', '.join(f['hosts'])}] {f['message']}"))
