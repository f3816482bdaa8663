"""Shared test helpers: `bench` in this process (cli), or as a real process, as a user would (bench).

cli() runs bench.cli.main in the test's own process with stdout and stderr
captured: for parsing, bad input, dry runs and reports, which launch nothing.
bench() starts `python -m bench` for what needs a process of its own (ranks,
signals, a fresh interpreter). Unit tests may not start processes unless
marked `process` (tests/unit/conftest.py enforces it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests import unit_window

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# bench validate keeps every verdict in a history store (bench.history), by default the user's own
# (~/.local/state/vitbench): the suite's validates of made-up nodes must not fill it, nor read drifts from it
# into their rows. The history tests name their own store; every other test, and the processes it starts, none.
os.environ.setdefault("VITBENCH_HISTORY", "off")

# Tests Ctrl-C bench (SIGINT to its process) and expect what a terminal's user gets. A suite started in the
# background of a non-interactive shell (`make test &` in a script) inherits SIGINT ignored, every process it
# starts inherits that across exec, and bench then rightly ignores Ctrl-C: three tests failed so, none of them
# bench's fault. A handler (not SIG_IGN) here is reset to the default in every child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def bench(*args: str, timeout: float = 600, env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -m bench ARGS` and return the finished process (text output)."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd or REPO)


@contextlib.contextmanager
def reaped(proc: subprocess.Popen):
    """proc for the block; on leaving, if it still runs (a wait that failed, an assertion), killed and its pipes
    drained: a failed test must not leave bench, and the ranks it would have stopped, running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@dataclass
class CliResult:
    """What cli() gives back: the shape of a finished subprocess.CompletedProcess."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env: dict | None = None, cwd: str | None = None, **_: object) -> CliResult:
    """bench.cli.main(args) in this process; env (the whole environment) and cwd apply for the call only."""
    from bench import cli as cli_module

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli_module.main(list(args))
            except SystemExit as e:  # --help, --version
                rc = e.code if isinstance(e.code, int) else 0
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return CliResult(rc, out.getvalue(), err.getvalue())


def one_json(stdout: str) -> dict:
    """stdout must hold exactly one JSON document and nothing else."""
    return json.loads(stdout)


def ok_record(proc: subprocess.CompletedProcess) -> dict:
    """A finished `bench ... --json` run: exit 0, one record on stdout, valid against the schema, status ok."""
    from bench.core import results

    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    assert rec["status"] == "ok"
    return rec


def assert_bad_input(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, one stderr line naming the option/file, no traceback, nothing on stdout."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


# Small, fast runs for the tests: the smallest preset, a small synthetic set.
FAST = ("--model", "vit-micro-p4-32", "--synthetic-size", "512", "--micro-batch", "16")
# A sweep's points at their smallest on this machine's two ranks (tests/multiproc/test_sweep.py).
SWEEP_POINT = ("--gpus", "2", "--dataset", "synthetic", *FAST, "--steps", "6", "--timing-warmup", "2", "--no-eval")


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "results")


@pytest.fixture(scope="session")
def ddp_sweep(tmp_path_factory) -> tuple[str, subprocess.CompletedProcess]:
    """(--out, the finished process) of one `bench sweep ddp`: DeepSpeed ZeRO-0, DDP and FSDP2 on the same two ranks.
    test_sweep checks the suite on it; test_engines compares FSDP2 with DDP on its points, which are the runs it
    would otherwise launch itself (the suite's budget: two launches)."""
    out = str(tmp_path_factory.mktemp("ddp-sweep"))
    return out, bench("sweep", "ddp", *SWEEP_POINT, "--out", out, "--json")


def pytest_collection_modifyitems(session, config, items) -> None:
    """The unit tests run while the multi-host hung runs wait out their timeouts (tests/multihost/conftest.stalls
    returns once every fault is in): just before the first test that reads those runs. About a minute of pure
    Python on one core, when no rank starts and the machine otherwise idles; the runs' timed part (stall to exit:
    a stack request, a stop, cleanup over ssh) keeps the other core. Without the multi-host tests, nothing moves."""
    first = next((it for it in items if "hangs" in getattr(it, "fixturenames", ())), None)
    unit = [it for it in items if it.nodeid.startswith("tests/unit/")]
    if first is None or not unit:
        return
    rest = [it for it in items if not it.nodeid.startswith("tests/unit/")]
    at = rest.index(first)
    # Half the unit files in a second pytest process beside this one, on the other core (tests/unit_window.py).
    unit, files = unit_window.split(unit)
    if files:
        config.stash[_SECOND] = unit_window.Second(files, config.getoption("markexpr") or "", str(config.rootpath))
        config.stash[_FIRST_UNIT] = unit[0].nodeid if unit else None
    items[:] = [*rest[:at], *unit, *rest[at:]]


_SECOND = pytest.StashKey["unit_window.Second"]()
_FIRST_UNIT = pytest.StashKey["str | None"]()


def pytest_runtest_setup(item) -> None:
    """The second half of the unit files starts as this session's first unit test is set up: the stalls' window."""
    second = item.config.stash.get(_SECOND, None)
    if second is not None and second.proc is None and item.nodeid == item.config.stash.get(_FIRST_UNIT, None):
        second.start(unit_window.basetemp(item.config))


def pytest_sessionfinish(session, exitstatus) -> None:
    second = session.config.stash.get(_SECOND, None)
    if second is None:
        return
    if second.proc is None and exitstatus in (0, 1):  # the window never came (a failure before it): run it now
        second.start(unit_window.basetemp(session.config))
    rc = second.finish(interrupted=exitstatus == 2)
    session.config.stash[_SHOWN] = unit_window.shown(second, rc)
    if rc not in (0, None) and session.exitstatus == 0:
        session.exitstatus = 1


_SHOWN = pytest.StashKey["list[str]"]()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for line in config.stash.get(_SHOWN, []):
        terminalreporter.write_line(line)
