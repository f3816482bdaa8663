"""bench hosts' table: each host and its slots (ranges for 8-GPU nodes), and the world size."""

from __future__ import annotations


def _slot_text(slots: list[int]) -> str:
    """[0,1,2,3,6] -> "0-3,6": readable for 8-GPU nodes."""
    parts: list[str] = []
    start = prev = slots[0]
    for s in [*slots[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ",".join(parts)


def render(source: str, resources: dict[str, list[int]]) -> None:
    world_size = sum(len(s) for s in resources.values())
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    # Text, not a markup string: a path like "hosts[a]" must print as written.
    console.print(Text(f"hosts: {source}"))
    table = Table()
    table.add_column("host")
    table.add_column("slots")
    table.add_column("count", justify="right")
    for host, slots in resources.items():
        table.add_row(host, _slot_text(slots), str(len(slots)))
    table.add_section()
    table.add_row(f"{len(resources)} node(s)", "world size", str(world_size))
    console.print(table)
