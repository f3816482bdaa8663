"""docs/options.md: every option of every command, its default and its help, made from the parsers themselves.

    text = table(subparsers(build_parser()))     # bench.cli's parsers; `make options-doc` writes docs/options.md

tests/unit/test_options_table.py fails when docs/options.md is not what this makes of today's parsers, so the
page cannot drift from --help-all.
"""

from __future__ import annotations

import argparse

from bench.commands.common import SHORT_HELP
from bench.core.options import shown

HEAD = r"""# Every option of every command

Made from bench's parsers by `make options-doc` (bench/commands/options_table.py); the suite fails when this
page differs from them. `bench <command> --help` shows the options marked **\***, `--help-all` every one;
each can also be set in a site profile (`--config FILE`, docs/operator.md).
"""


def _cell(text: str) -> str:
    text = text.replace("%%", "%").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(text.split())


def _what(a: argparse.Action, default: str) -> str:
    """The help without the "(default: X)" bench.core.options added: the default has its own column."""
    return (a.help or "").replace("%%", "%").removesuffix(f" (default: {default})")


def _default(a: argparse.Action) -> str:
    value = getattr(a, "field_default", a.default)
    if a.nargs == 0 and not hasattr(a, "field_default"):
        return "off" if value in (False, None) else "on"
    return shown(value)


def _name(a: argparse.Action) -> str:
    flags = ", ".join(a.option_strings)
    if a.nargs == 0:
        return flags
    metavar = a.metavar if a.metavar is not None else a.dest.upper()
    if a.nargs == "?":
        return f"{flags} [{metavar}]"
    return f"{flags} {metavar}"


def table(parsers: dict[str, argparse.ArgumentParser]) -> str:
    out = [HEAD]
    for command, p in parsers.items():
        short = set(SHORT_HELP.get(command, ())) or None
        out += [f"## bench {command}", "", "| option | default | what |", "|---|---|---|"]
        for a in p._actions:
            if not a.option_strings or a.help == argparse.SUPPRESS or a.dest in ("help", "help_all"):
                continue
            star = " **\\***" if short is None or set(a.option_strings) & short else ""
            default = _default(a)
            out.append(f"| `{_name(a)}`{star} | {_cell(default)} | {_cell(_what(a, default))} |")
        out.append("")
    return "\n".join(out)
