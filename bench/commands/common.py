"""What every subcommand's parser shares: the output flags, written once.

Each subcommand module exposes HELP, add_arguments(parser) and main(args) -> int;
only bench.cli imports them. Their options are generated from typed
dataclasses (bench.core.options), so a command reads a config, not a Namespace.
"""

from __future__ import annotations

import argparse


def add_json_flag(p: argparse.ArgumentParser, what: str = "one JSON document") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} on stdout and nothing else")


def add_dry_run_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--dry-run", action="store_true", help=what)
