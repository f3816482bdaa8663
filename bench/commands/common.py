"""What every subcommand's parser shares: the output flags, written once.

Each subcommand module exposes HELP, add_arguments(parser) and main(args) -> int;
only bench.cli imports them. Their options are generated from typed
dataclasses (bench.core.options), so a command reads a config, not a Namespace.
"""

from __future__ import annotations

import argparse
import os

from bench.core.errors import BadInput


def add_json_flag(p: argparse.ArgumentParser, what: str = "one JSON document") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} on stdout and nothing else")


def add_dry_run_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--dry-run", action="store_true", help=what)


def add_metrics_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-file", metavar="FILE", default=None,
                   help="also write the headline figures as a Prometheus text file (node_exporter's textfile "
                        "collector reads *.prom in its directory; default: not written)")


def check_metrics_file(path: str | None) -> None:
    """Bad input before anything runs: the file's folder must exist and be writable."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BadInput(f"--metrics-file: {folder} is not a directory")
    if not os.access(folder, os.W_OK):
        raise BadInput(f"--metrics-file: cannot write in {folder}")


def write_metrics(path: str | None, rec: dict) -> None:
    if path is not None:
        from bench.render.metrics_file import write
        write(path, rec)
