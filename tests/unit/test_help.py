"""--help answers: every option that takes a value says its default, few choices are listed, --no-x is shown;
an error is one line under the subcommand's name."""

from __future__ import annotations

import argparse
import re

import pytest

from tests.conftest import assert_bad_input, cli


def subparsers() -> dict[str, argparse.ArgumentParser]:
    from bench.cli import build_parser

    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def shown_options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"]


def test_validate_help_shows_the_default_level_the_precisions_and_the_threshold():
    out = " ".join(cli("validate", "--help-all").stdout.split())   # argparse wraps lines: compare words
    assert "--level {quick,full,prolog,health}" in out and "(default: quick)" in out
    assert "--precision {fp32,fp16,bf16}" in out and "training precision (default: fp32)" in out
    assert "the fall that is a regression (default: 5%)" in out


@pytest.mark.parametrize("command", list(subparsers()))
def test_every_option_that_takes_a_value_says_its_default(command):
    silent = [a.option_strings[0] for a in shown_options(subparsers()[command])
              if a.nargs != 0 and "default" not in a.help.lower()]
    assert silent == []


@pytest.mark.parametrize("command", list(subparsers()))
def test_few_choices_are_listed(command):
    hidden = [a.option_strings[0] for a in shown_options(subparsers()[command])
              if a.choices and len(a.choices) <= 8 and not str(a.metavar).startswith("{")]
    assert hidden == []


def test_the_no_forms_are_shown_with_what_they_turn_off():
    out = " ".join(cli("run", "--help-all").stdout.split())
    assert "--eval, --no-eval measure test-set accuracy at the end (default: on)" in out
    assert "--compile, --no-compile torch.compile the model (default: off)" in out
    assert cli("run", "--no-eval", "--dataset", "synthetic", "--dry-run").returncode == 0


@pytest.mark.parametrize("argv,line", [
    (["sweep", "strong", "--frobnicate", "1"], "bench sweep: error: unrecognized arguments: --frobnicate 1"),
    (["--frobnicate"], "bench run: error: unrecognized arguments: --frobnicate"),
    (["run", "--precision", "fp9"], "bench run: error: argument --precision: invalid choice: 'fp9'"),
    (["hosts", "--num-nodes", "0"], "bench hosts: error: --num-nodes: must be at least 1"),
    (["sweeep", "batch"], "bench: error: 'sweeep' is not a command (choose from run, hosts,"),
])
def test_an_error_is_one_line_under_the_subcommand_name(argv, line):
    proc = cli(*argv)
    assert_bad_input(proc, line)
    assert proc.stderr.count("error:") == 1 and proc.stderr.startswith(line.split(":")[0] + ": error:")


@pytest.mark.parametrize("command", ["run", "validate", "sweep", "tune"])
def test_help_is_one_screen_and_help_all_shows_every_option(command):
    from bench.commands.common import SHORT_HELP

    short, full = cli(command, "--help").stdout, cli(command, "--help-all").stdout
    assert len(short.splitlines()) < 60, f"bench {command} --help: {len(short.splitlines())} lines"
    flags = [a.option_strings[0] for a in shown_options(subparsers()[command])]
    missing = [f for f in flags if f not in full]
    assert missing == [], missing
    shown = [f for f in flags if re.search(rf"^  {re.escape(f)}\b", short, re.M)]
    assert sorted(shown) == sorted(f for f in flags if f in SHORT_HELP[command] or f == "--help-all")
    assert f"{len(flags) - len(shown)} more options: bench {command} --help-all" in short


# "(default: X)", "default X", "default: X" as a help says them; X up to the next ", " ";" ")" or ":".
STATED = re.compile(r"\bdefault:?\s+([^;:()]+?)(?=, |[;:)]|$)")


def stated_default(help: str) -> str | None:
    m = STATED.search(help.replace("%%", "%"))
    return m.group(1).strip() if m else None


def says(stated: str, default) -> bool:
    """The stated default is the code's value, alone or followed by words about it ("10% of the nodes")."""
    from bench.core.options import shown

    return any(stated == v or stated.startswith(v + " ") for v in (shown(default), str(default)))


def test_every_stated_default_is_the_code_default():
    """A help string that says its default says the one the code takes: the dataclass field's for the generated
    options (argparse's None stands for it), argparse's own for the rest. Defaults the code leaves to the run
    (None: "every GPU", "the level's") are words, not values, and not compared."""
    from bench.core.options import shown

    wrong = []
    for command, p in subparsers().items():
        for a in shown_options(p):
            default = getattr(a, "field_default", a.default)
            said = stated_default(a.help or "")
            if said is None or default is None or default is argparse.SUPPRESS or a.nargs == 0 and default is False:
                continue
            if not says(said, default):
                wrong.append(f"bench {command} {a.option_strings[0]}: help says {said!r}, code {shown(default)!r}")
    assert wrong == []
