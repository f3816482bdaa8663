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
from bench.commands.common import SHORT_HELP, add_help_all
from bench.commands.profile import add_flag
from bench.commands.profile import apply as apply_profile
from bench.commands.profile import said
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

    short: tuple[str, ...] | None = None   # the options --help shows (bench.commands.common.SHORT_HELP); None: all

    def error(self, message: str):  # noqa: D401 - argparse API
        raise BadInput(message)

    def print_help(self, file=None, every: bool = False) -> None:  # noqa: D401 - argparse API
        self._every = every
        super().print_help(file)

    def format_help(self) -> str:
        """--help: the short list and a line saying how many more --help-all shows; --help-all: every option.
        Either way the usage line is `bench run [options]`: the options are listed below it."""
        if self.short is None:
            return super().format_help()
        every = getattr(self, "_every", False)
        hidden = [] if every else [a for a in self._actions if a.option_strings and a.help != argparse.SUPPRESS
                                   and not set(a.option_strings) & {*self.short, "-h", "--help-all"}]
        saved, usage = [(a, a.help) for a in hidden], self.usage
        for a in hidden:
            a.help = argparse.SUPPRESS
        positionals = " ".join(a.metavar or a.dest for a in self._actions if not a.option_strings)
        self.usage = f"%(prog)s {positionals + ' ' if positionals else ''}[options]"
        try:
            text = super().format_help()
        finally:
            self.usage = usage
            for a, h in saved:
                a.help = h
        return text if every else text + f"\n{len(hidden)} more options: {self.prog} --help-all\n"


def build_parser() -> Parser:
    parser = Parser(
        prog="bench",
        description="DeepSpeed ViT training benchmark for single nodes and clusters. "
        "With no subcommand, `bench [options]` is `bench run [options]`.",
        epilog="Every command: --help (the options most people use), --help-all (every option), --config FILE "
        "or $BENCH_CONFIG (a site profile in TOML: hostfile, launcher, container, master address, --out, any "
        "option's default; the command line overrides it; --dry-run says where each value came from).",
    )
    parser.add_argument("--version", action="version", version=f"vitbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, modname in SUBCOMMANDS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        add_flag(p)
        add_help_all(p)
        p.short = SHORT_HELP.get(name)
        p.set_defaults(_main=mod.main)
    return parser


def subparsers(parser: Parser) -> dict[str, Parser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _with_default_command(argv: list[str]) -> list[str]:
    """`bench --gpus 4` -> `bench run --gpus 4`; `bench --help` stays top-level help."""
    if not argv:
        return ["run"]
    if argv[0] == "--config" and len(argv) > 1:   # `bench --config site.toml validate`: the command's --config
        rest = _with_default_command(argv[2:])
        return [rest[0], "--config", argv[1], *rest[1:]]
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


def _from_profile(e: BadInput, sources: dict[str, str]) -> str:
    """An option's refusal names the profile when the profile gave its value: `--launcher: ... (site.toml)`."""
    text = str(e)
    option = text.split(":", 1)[0]
    dest = option[2:].replace("-", "_") if option.startswith("--") else None
    where = sources.get(dest or "")
    return f"{text} (from {where})" if where and where != "command line" else text


def _main(argv: list[str]) -> int:
    prog = "bench"
    sources: dict[str, str] = {}
    try:
        word = argv[2] if argv[:1] == ["--config"] and len(argv) > 2 else argv[0] if argv else "-"
        if not word.startswith("-") and word not in SUBCOMMANDS:
            # `bench sweeep`: a mistyped command, not `bench run` with a stray word.
            raise BadInput(f"{word!r} is not a command (choose from {', '.join(SUBCOMMANDS)})")
        argv = _with_default_command(argv)
        prog = prog_of(argv)
        parser = build_parser()
        # Unknown options are the subcommand's error: argparse would report them under the top-level `bench`.
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            raise BadInput(f"unrecognized arguments: {' '.join(unknown)}")
        parsers = subparsers(parser)
        sources = apply_profile(parsers, args.command, args, dict(os.environ))
        args._sources = sources
        rc = int(args._main(args) or 0)
        if getattr(args, "dry_run", False) and rc == 0:   # after the plan: a refusal stays one line
            print("\n".join(said(parsers, args.command, args, sources)), file=sys.stderr)
        return rc
    except BadInput as e:
        print(f"{prog}: error: {_from_profile(e, sources)}", file=sys.stderr)
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
