"""The unit tests on both cores while the multi-host hung runs wait out their timeouts (tests/conftest.py).

tests/multihost/conftest.stalls returns once every fault of its runs is in; from there the runs only wait (minutes
of timeouts, a light timed part: a stack request, a stop), and the suite runs the unit tests, pure Python, in that
window. One pytest process is one core: the other idled. So the unit files are split in two by the test items
they hold: this session runs one half there, and a second pytest process, started as the first unit test of this
half is set up, runs the other half beside it, with a basetemp of its own. This session waits for it at its end,
shows its summary, and fails if it failed. Outside a session with the stalls (`make test-fast`, one unit file),
nothing is split.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

WAIT_S = 1800  # the second half's own bound: a unit half runs in about two minutes


class Second:
    """The other half: its files, then its process and output once started."""

    def __init__(self, files: list[str], markexpr: str, root: str):
        self.files, self.markexpr, self.root = files, markexpr, root
        self.proc: subprocess.Popen | None = None
        self.log: Path | None = None

    def start(self, basetemp: Path) -> None:
        self.log = basetemp / "unit-second.log"
        argv = [sys.executable, "-m", "pytest", "-q", "-ra", "--durations=10", "-p", "no:cacheprovider",
                "--basetemp", str(basetemp / "unit-second"), *(["-m", self.markexpr] if self.markexpr else []),
                *self.files]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(argv, cwd=self.root, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def finish(self, interrupted: bool) -> int | None:
        if self.proc is None:
            return None
        if interrupted and self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9


def split(units: list[pytest.Item]) -> tuple[list[pytest.Item], list[str]]:
    """(the items this session keeps, the files of the other half): whole files, each to the half with fewer items
    so far, the files with most items first."""
    by_file: dict[str, list[pytest.Item]] = {}
    for it in units:
        by_file.setdefault(it.nodeid.split("::", 1)[0], []).append(it)
    halves: tuple[list[str], list[str]] = ([], [])
    counts = [0, 0]
    for f in sorted(by_file, key=lambda f: (-len(by_file[f]), f)):
        h = 0 if counts[0] <= counts[1] else 1
        halves[h].append(f)
        counts[h] += len(by_file[f])
    keep = set(halves[0])
    return [it for it in units if it.nodeid.split("::", 1)[0] in keep], sorted(halves[1])


def shown(second: Second, rc: int | None) -> list[str]:
    """The lines to show of the second half: its summary lines, whole where it failed."""
    text = second.log.read_text(errors="replace") if second.log and second.log.exists() else ""
    lines = text.splitlines()
    head = f"tests/unit, the other half ({len(second.files)} files, a second pytest process beside this one): exit {rc}"
    return [head, *(lines if rc else lines[-15:])]


def basetemp(config) -> Path:
    return Path(config._tmp_path_factory.getbasetemp())
