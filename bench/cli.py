"""The `bench` command line.

    bench --gpus 2                 # same as `bench run --gpus 2`
    bench run --gpus 2 --dataset synthetic --steps 30 --json
    bench hosts --hostfile hostfiles/tesla --exclude tesla-node5
    bench probe --hostfile hostfiles/tesla --json

Each subcommand lives in its own module of bench/commands, which exposes
HELP, add_arguments(p) and main(args) -> int; only this module imports them.
Nothing below bench.worker imports torch (an import-linter contract), so
`bench --help` answers at once.

Exit status: 0 ok; 1 the measured thing failed; 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys

from bench import __version__
from bench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, BadInput, RunFailed, StorageFailed

# name -> module; order is the order of `bench --help`.
SUBCOMMANDS: dict[str, str] = {
    "run": "bench.commands.run",
    "hosts": "bench.commands.hosts",
    "probe": "bench.commands.probe",
    "comm": "bench.commands.comm",
    "validate": "bench.commands.validate",
    "sweep": "bench.commands.sweep",
    "tune": "bench.commands.tune",
    "report": "bench.commands.report",
    "compare": "bench.commands.compare",
    "history": "bench.commands.history",
}


class Parser(argparse.ArgumentParser):
    """argparse that reports bad options as one line (BadInput), not usage + exit.

    The line's prefix (`bench sweep: error:`) is written once, by main, for
    argparse's errors and the commands' own alike.
    """

    def error(self, message: str):  # noqa: D401 - argparse API
        raise BadInput(message)


def build_parser() -> Parser:
    parser = Parser(
        prog="bench",
        description="DeepSpeed ViT training benchmark for single nodes and clusters. "
        "With no subcommand, `bench [options]` is `bench run [options]`.",
    )
    parser.add_argument("--version", action="version", version=f"vitbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, modname in SUBCOMMANDS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def _with_default_command(argv: list[str]) -> list[str]:
    """`bench --gpus 4` -> `bench run --gpus 4`; `bench --help` stays top-level help."""
    if not argv:
        return ["run"]
    first = argv[0]
    if first in SUBCOMMANDS or first in ("-h", "--help", "--version"):
        return argv
    return ["run", *argv]


class PipeSafe:
    """A stream that stops writing when its reader went away (`bench run ... | head`).

    Without it the BrokenPipeError of a table or JSON written after the run
    ended the command there, and its exit status was lost: a failed run
    piped into head exited 0. With it the rest of the output is dropped
    (the descriptor then points at /dev/null, so the final flush succeeds)
    and the command returns the run's own status.
    """

    def __init__(self, stream) -> None:
        self._stream = stream
        self.broken = False

    def _broke(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._broke()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._broke()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PipeSafe(sys.stdout), PipeSafe(sys.stderr)
    try:
        return _main(argv)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.stdout, sys.stderr = saved


def prog_of(argv: list[str]) -> str:
    """The name errors are reported under: `bench sweep`, or `bench` before a subcommand is known."""
    return f"bench {argv[0]}" if argv and argv[0] in SUBCOMMANDS else "bench"


def _main(argv: list[str]) -> int:
    prog = "bench"
    try:
        if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
            # `bench sweeep`: a mistyped command, not `bench run` with a stray word.
            raise BadInput(f"{argv[0]!r} is not a command (choose from {', '.join(SUBCOMMANDS)})")
        argv = _with_default_command(argv)
        prog = prog_of(argv)
        parser = build_parser()
        # Unknown options are the subcommand's error: argparse would report them under the top-level `bench`.
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            raise BadInput(f"unrecognized arguments: {' '.join(unknown)}")
        return int(args._main(args) or 0)
    except BadInput as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StorageFailed as e:
        # The one document on stdout (with --json too) is what could not be written.
        if e.record is not None:
            print(json.dumps(e.record), flush=True)
        print(f"bench: failed: {e.line()}", file=sys.stderr)
        return EXIT_FAILED
    except RunFailed as e:
        print(f"bench: failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        if e.filename is None:
            raise
        # A file of the run that could not be written or read where no StorageFailed was raised.
        print(f"bench: failed: {e.filename}: {e.strerror}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
