"""docs/options.md is what bench's parsers say today: every option, its default and its help (`make options-doc`
writes it). In-process, a fraction of a second."""

from __future__ import annotations

import os

from tests.unit.test_docs import REPO


def test_the_options_page_is_made_from_the_parsers():
    from bench.cli import build_parser, subparsers
    from bench.commands.options_table import table

    with open(os.path.join(REPO, "docs", "options.md")) as f:
        page = f.read()
    assert page == table(subparsers(build_parser())), "docs/options.md is out of date: run `make options-doc`"


def test_the_page_has_every_shown_option_of_every_command():
    import argparse

    from bench.cli import build_parser, subparsers

    with open(os.path.join(REPO, "docs", "options.md")) as f:
        page = f.read()
    for command, p in subparsers(build_parser()).items():
        section = page.split(f"## bench {command}\n", 1)[1].split("\n## ", 1)[0]
        for a in p._actions:
            if a.option_strings and a.help != argparse.SUPPRESS and a.dest not in ("help", "help_all"):
                assert f"`{a.option_strings[0]}" in section, (command, a.option_strings[0])
