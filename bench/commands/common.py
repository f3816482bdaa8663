"""What every subcommand's parser shares: the output flags, written once.

Each subcommand module exposes HELP, add_arguments(parser) and main(args) -> int;
only bench.cli imports them. Their options are generated from typed
dataclasses (bench.core.options), so a command reads a config, not a Namespace.
"""

from __future__ import annotations

import argparse
import os

from bench.core.errors import BadInput
from bench.core.options import add_options


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


# What `--help` shows of each command: the options most people use; `--help-all` shows every option. The rest of
# the commands are small enough to show whole.
SHORT_HELP: dict[str, tuple[str, ...]] = {
    "run": ("--config", "--hostfile", "--gpus", "--launcher", "--model", "--dataset", "--steps", "--micro-batch",
            "--zero-stage", "--precision", "--engine", "--out", "--dry-run", "--json"),
    "validate": ("--config", "--hostfile", "--launcher", "--level", "--checks", "--out", "--drain", "--undrain",
                 "--drain-file", "--junit", "--dry-run", "--json"),
    "sweep": ("--config", "--hostfile", "--gpus", "--launcher", "--model", "--dataset", "--steps", "--micro-batch",
              "--micro-batches", "--precision", "--name", "--out", "--dry-run", "--json"),
    "tune": ("--config", "--hostfile", "--gpus", "--launcher", "--model", "--dataset", "--budget", "--budget-minutes",
             "--global-batch", "--strategies", "--micro-batches", "--out", "--dry-run", "--json"),
    "comm": ("--config", "--hostfile", "--gpus", "--launcher", "--op", "--sizes", "--iters", "--out", "--dry-run",
             "--json"),
}


def add_help_all(p: argparse.ArgumentParser) -> None:
    p.add_argument("--help-all", action=HelpAll, help="show every option and exit")


class HelpAll(argparse.Action):
    """--help-all: the command's help with every option in it."""

    def __init__(self, option_strings, dest, **kw) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.print_help(every=True)
        parser.exit()


LAUNCH_GROUP = "launch (how and where ranks start: a site profile's)"
TRAINING_GROUP = "training (bench run's options; sweep and tune take the same group)"


def add_training_options(p: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> None:
    """bench run's options, once for run, sweep and tune: the launch's in one group, the training job's in another
    (a command leaves out what it searches itself: tune's micro batch, stage, ...)."""
    import dataclasses

    from bench.core.config import LaunchConfig, RunConfig

    launch = {f.name for f in dataclasses.fields(LaunchConfig)}
    add_options(p, RunConfig, skip=skip, group_of=lambda name: LAUNCH_GROUP if name in launch else TRAINING_GROUP)
