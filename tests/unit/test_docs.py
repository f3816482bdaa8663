"""The docs a newcomer reads are tested: every command they show parses, and every path they name exists.

    python -m pytest -q tests/unit/test_docs.py

A command is a line of a code block (indented, or fenced) in README.md,
docs/*.md or bench/README.md, or of the docstring of bench/cli.py or a
subcommand's module (bench/commands/), that runs bench: `bench ...`, `python -m bench
...`, `docker compose ... run [--rm] bench ...`, `apptainer exec ... SIF
bench ...`, `apptainer run ... SIF ...` (the image's runscript is bench),
`exec bench ...` in a script; a `$ ` prompt and VAR=value prefixes are
dropped, lines ending in `\\` are joined, and the command ends at a shell
operator (>, |, &&, ;). Each one is parsed by bench's own parser; where the
subcommand has --dry-run (run, sweep, comm) and every --hostfile it names is in
the project, it also runs with --dry-run in this process, on a node without
a GPU, and must exit 0; so does bench hosts, which reads files only. A doc that shows an old option name (a hidden alias,
which prints "is now") fails too: docs show the current names.

Paths: a link [text](target) must resolve from the doc's folder (and a
#anchor must be a heading of the target); a path in backticks whose first
part is a file or folder of the project must exist (`bench/worker/data.py:171`
is checked as bench/worker/data.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def doc_files() -> list[str]:
    docs = os.path.join(REPO, "docs")
    pages = sorted(os.path.join("docs", f) for f in os.listdir(docs) if f.endswith(".md")) if os.path.isdir(docs) else []
    return ["README.md", *pages, "bench/README.md"]


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str
    argv: tuple[str, ...]   # bench's own arguments

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def code_blocks(text: str) -> list[list[tuple[int, str]]]:
    """The code blocks (fenced, or indented 4+ spaces after a blank line), each as (line number, text) lines."""
    blocks: list[list[tuple[int, str]]] = []
    fenced, indented, blank_before = False, False, True
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            if fenced:
                blocks.append([])
            continue
        if fenced:
            blocks[-1].append((n, line))
        elif line.strip() == "":
            blank_before = True
            continue
        elif line.startswith("    ") and (blank_before or indented):
            if not indented:
                blocks.append([])
            indented = True
            blocks[-1].append((n, line))
        else:
            indented = False
        blank_before = False
    return blocks


def code_lines(text: str) -> list[tuple[int, str]]:
    """The lines a reader would type: in a block that shows a session (`$ ` prompts), only the prompted ones."""
    out = []
    for block in code_blocks(text):
        if any(line.lstrip().startswith("$ ") for _, line in block):
            block = [(n, line) for n, line in block if line.lstrip().startswith("$ ")]
        out += block
    return out


SHELL_OPS = {">", ">>", "2>", "|", "&&", "||", ";", "&"}


def bench_args(tokens: list[str]) -> list[str] | None:
    """bench's own arguments in a shell command's tokens, or None when the command does not run bench."""
    while tokens and (tokens[0] == "$" or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0])):
        tokens = tokens[1:]
    for i, t in enumerate(tokens):
        if t in SHELL_OPS:
            tokens = tokens[:i]
            break
    if not tokens:
        return None
    if tokens[0] == "exec":
        tokens = tokens[1:]
    if tokens[:1] == ["bench"]:
        return tokens[1:]
    if len(tokens) > 2 and tokens[0].startswith("python") and tokens[1:3] == ["-m", "bench"]:
        return tokens[3:]
    if tokens[:2] == ["docker", "compose"] and "run" in tokens:
        rest = [t for t in tokens[tokens.index("run") + 1:]]
        while rest and rest[0].startswith("-"):
            rest = rest[1:]
        return rest[1:] if rest and rest[0].startswith("bench") else None
    if tokens[:2] == ["apptainer", "exec"] and "bench" in tokens:
        return tokens[tokens.index("bench") + 1:]
    if tokens[:2] == ["apptainer", "run"]:
        sif = next((i for i, t in enumerate(tokens) if t.endswith(".sif")), None)
        return tokens[sif + 1:] if sif is not None else None
    return None


def docstring_files() -> list[str]:
    """The modules whose docstrings show the commands: the entry point and one per subcommand."""
    folder = os.path.join(REPO, "bench", "commands")
    return ["bench/cli.py", *sorted(f"bench/commands/{f}" for f in os.listdir(folder) if f.endswith(".py"))]


def commands(doc: str) -> list[Command]:
    with open(os.path.join(REPO, doc)) as f:
        text = f.read()
    if doc.endswith(".py"):
        import ast

        text = "\n" * (ast.parse(text).body[0].lineno - 1) + (ast.get_docstring(ast.parse(text), clean=False) or "")
    lines = code_lines(text)
    out, i = [], 0
    while i < len(lines):
        n, text = lines[i]
        joined = text.strip()
        while joined.endswith("\\") and i + 1 < len(lines):
            i += 1
            joined = joined[:-1] + " " + lines[i][1].strip()
        i += 1
        try:
            tokens = shlex.split(joined, comments=True)
        except ValueError:
            continue  # not shell: a table or a transcript
        args = bench_args(tokens)
        if args is not None:
            out.append(Command(doc, n, joined, tuple(args)))
    return out


ALL_COMMANDS = [c for d in doc_files() + docstring_files() for c in commands(d)]


def _hostfiles_present(argv: list[str]) -> bool:
    named = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--hostfile"]
    if not named and "slurm" in argv:
        return False  # the allocation is the hostfile: none here
    return all(os.path.isfile(os.path.join(REPO, h)) for h in named)


def _dry_runnable(argv: list[str]) -> bool:
    """run, sweep and comm dry-run anywhere (tune's GPU counts need the GPUs); the hostfile named must be here."""
    return argv[0] in ("run", "sweep", "comm") and "--help" not in argv and _hostfiles_present(argv)


@pytest.fixture
def no_gpu_node(tmp_path, monkeypatch):
    """This process as a node without a GPU: no nvidia-smi on PATH, no CUDA_VISIBLE_DEVICES."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(REPO)
    return tmp_path


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from bench import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_the_docs_show_commands():
    # The front door shows the set-up commands and at least one command per task.
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    assert "make bench" in readme and "make test" in readme
    assert len(ALL_COMMANDS) >= 20, [c.where for c in ALL_COMMANDS]


@pytest.mark.parametrize("cmd", ALL_COMMANDS, ids=lambda c: c.where)
def test_doc_command_parses_and_dry_runs(cmd, no_gpu_node):
    from bench import cli
    from bench.core.errors import BadInput

    argv = cli._with_default_command(list(cmd.argv))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            cli.build_parser().parse_args(argv)
    except BadInput as e:
        pytest.fail(f"{cmd.where}: `{cmd.text}` does not parse: {e}")
    except SystemExit:  # --help, --version
        pass
    assert " is now " not in err.getvalue(), f"{cmd.where}: `{cmd.text}` uses an old name: {err.getvalue()}"
    if _dry_runnable(argv):
        rc, _, stderr = run_cli([*argv, "--dry-run", "--out", str(no_gpu_node / "out")])   # no data set needed
        assert rc == 0, f"{cmd.where}: `{cmd.text}` --dry-run exits {rc}: {stderr.strip()}"
    elif argv[0] == "hosts" and "--help" not in argv and _hostfiles_present(argv):
        rc, _, stderr = run_cli(argv)   # reads files only: it runs as it is
        assert rc == 0, f"{cmd.where}: `{cmd.text}` exits {rc}: {stderr.strip()}"


# --- paths ---------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"^[A-Za-z0-9_.\-/]+$")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set[str]:
    with open(path) as f:
        return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", f.read(), re.M)}


def prose(text: str) -> str:
    """The doc without its code blocks (their paths are examples of the user's, not the project's)."""
    inside = {n for block in code_blocks(text) for n, _ in block}
    return "\n".join(line for n, line in enumerate(text.splitlines(), 1) if n not in inside)


def named_paths(doc: str) -> list[tuple[str, str]]:
    """(path as written, absolute path) of every project path the doc names in prose."""
    folder = os.path.dirname(os.path.join(REPO, doc))
    with open(os.path.join(REPO, doc)) as f:
        text = prose(f.read())
    out = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        out.append((target, os.path.normpath(os.path.join(folder, target.split("#")[0])) if target[0] != "#"
                    else os.path.join(REPO, doc)))
    for m in CODE_SPAN.finditer(text):
        span = re.sub(r":\d+$", "", m.group(1).strip())
        if not PATHLIKE.match(span) or not ("/" in span or re.search(r"\.(py|md|json|sh|yaml|def|lock|toml)$", span)):
            continue
        first = span.split("/")[0]
        for base in (REPO, folder):
            if first in (".", "..") and base == REPO:
                continue
            if not first or first not in (".", "..") and not os.path.exists(os.path.join(base, first)):
                continue  # an absolute path (the user's machine) or not a part of the project
            out.append((span, os.path.normpath(os.path.join(base, span))))
            break
    return out


@pytest.mark.parametrize("doc", doc_files())
def test_doc_names_only_paths_that_exist(doc):
    missing = []
    for written, path in named_paths(doc):
        if not os.path.exists(path):
            missing.append(written)
        elif "#" in written and path.endswith(".md") and slug(written.split("#", 1)[1]) not in anchors(path):
            missing.append(f"{written} (no such heading)")
    assert not missing, f"{doc} names what the project does not have: {', '.join(missing)}"
