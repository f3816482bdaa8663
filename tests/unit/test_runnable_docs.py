"""The commands the docs mark runnable run, as a newcomer would type them, from a folder outside the checkout.

A doc marks a code block runnable with a line `<!-- runnable ... -->` before it (invisible on the rendered
page); every bench command of that block must then exit 0 as `python -m bench ...`, each in a process of its
own, started in a temporary folder holding only a copy of the project's hostfiles/ (what a site would have):
no data set, no results folder, no site profile. Marked blocks hold dry-runs, probes of this node and --help;
tests/unit/test_docs.py parses every other command.

Cost: one interpreter per command (about 1 s each here, 8 commands today).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.unit.test_docs import REPO, Command, commands, doc_files

MARK = re.compile(r"^<!--\s*runnable\b")


def marked_lines(doc: str) -> set[int]:
    """The line numbers of the first code block after each runnable mark."""
    from tests.unit.test_docs import code_blocks

    with open(os.path.join(REPO, doc)) as f:
        text = f.read()
    marks = [n for n, line in enumerate(text.splitlines(), 1) if MARK.match(line.strip())]
    blocks = code_blocks(text)
    out: set[int] = set()
    for m in marks:
        block = next((b for b in blocks if b and b[0][0] > m), None)
        assert block is not None, f"{doc}:{m}: a runnable mark with no code block after it"
        out |= {n for n, _ in block}
    return out


def runnable() -> list[Command]:
    out = []
    for doc in doc_files():
        lines = marked_lines(doc)
        out += [c for c in commands(doc) if c.line in lines]
    return out


RUNNABLE = runnable()


def test_the_front_door_and_both_pages_mark_runnable_commands():
    docs = {c.doc for c in RUNNABLE}
    assert {"README.md", "docs/operator.md", "docs/researcher.md"} <= docs, docs
    # The README's own first dry-run, which once failed outside the checkout (no ./data).
    assert any(c.argv[:4] == ("run", "--dry-run", "--zero-stage", "2") for c in RUNNABLE)


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    folder = tmp_path_factory.mktemp("newcomer")
    shutil.copytree(os.path.join(REPO, "hostfiles"), folder / "hostfiles")
    return folder


@pytest.mark.process
@pytest.mark.parametrize("cmd", RUNNABLE, ids=lambda c: c.where)
def test_a_runnable_doc_command_runs_from_another_folder(cmd, elsewhere):
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_CONFIG", "PYTHONPATH")}
    env["PYTHONPATH"] = REPO   # this checkout's bench, whatever the venv's editable install points at
    proc = subprocess.run([sys.executable, "-m", "bench", *cmd.argv], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{cmd.where}: `{cmd.text}` exits {proc.returncode}: {proc.stderr.strip()[-800:]}"
    assert not (elsewhere / "results").exists(), f"{cmd.where}: a dry-run wrote results/"
