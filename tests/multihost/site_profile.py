"""A site profile (bench --config FILE, or $BENCH_CONFIG) written by a multi-host test: the hosts, the launcher, the
container and the master address of the namespace hosts, so that `bench run` and `bench validate` take nothing
from their command line (issue 54).

    path = write(tmp_path / "site.toml", {"hostfile": str(c.hostfile), "launcher": "pdsh"}, run={"steps": 10})
    bench("run", env=dict(c.env, BENCH_CONFIG=str(path)))
    rec["sources"]["hostfile"] == came_from(path)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _toml(value: Any) -> str:
    """A TOML value: a JSON string is a TOML basic string (the same escapes), true/false, a number, an array."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))


def options(argv: tuple[str, ...] | list[str]) -> dict[str, str]:
    """("--model", "vit-micro-p4-32", ...) as a profile's keys: {"model": "vit-micro-p4-32", ...}."""
    assert len(argv) % 2 == 0 and all(a.startswith("--") for a in argv[::2]), argv
    return {a[2:]: v for a, v in zip(argv[::2], argv[1::2])}


def write(path: Path, site: dict[str, Any], **tables: dict[str, Any]) -> Path:
    """The profile: the site's keys at the top (every command's), then a table per command (that command's)."""
    lines = [f"{k} = {_toml(v)}" for k, v in site.items()]
    for command, keys in tables.items():
        lines += [f"[{command}]", *(f"{k} = {_toml(v)}" for k, v in keys.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def came_from(path: Path) -> str:
    """What a record's "sources" says of a value the profile named by $BENCH_CONFIG gave."""
    return f"{path} ($BENCH_CONFIG)"
