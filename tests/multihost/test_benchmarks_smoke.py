"""The benchmarks that need namespace hosts, at their smallest size (`--smoke`) on the session's hosts.

Each script builds its own hosts when run by hand; here its main() is given the session's `cluster` (and its
Slurm) instead, the suite's budget: it must return 0, say that it is a smoke run, and print its rows. What a
smoke run leaves out is in each script's `--smoke` help and in benchmarks/README.md. The other scripts are
tests/multiproc/test_benchmarks_smoke.py's.
"""

from __future__ import annotations

import importlib
import json

import pytest

from tests.multiproc.test_benchmarks_smoke import NUM, SMOKE, missing_lines

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

# script -> (the session fixtures its main() takes, the lines its smoke run must print).
EXPECTED: dict[str, tuple[tuple[str, ...], list[str]]] = {
    "validate_levels": (("cluster",), [
        rf"round 1 health\s+exit 0 PASS\s+{NUM} s  load {NUM}  \[preflight {NUM}s  inventory {NUM}s  health {NUM}s\]"]),
    "validate_orchestration": (("cluster",), [
        rf"  3 hosts  health\s+PASS  preflight\s+{NUM} s  inventory\s+{NUM} s  health\s+{NUM} s \(0 launch"]),
    "validate_scale_hosts": (("cluster", "slurm"), [
        r'\{"ssh_client_cpu_s": ',
        r'\{"hosts": 3, "load_before": .*"preflight": .*"inventory": .*"pdsh": .*"openmpi": .*"slurm": ']),
    "shared_dir_ops": (("cluster",), [
        # the rate while training can come out below 0: a smoke run's two seconds of it are within the noise
        rf" 2 ranks \(2x1\): \d+ requests in {NUM} s at 6 steps, \d+ in {NUM} s at \d+: -?{NUM}/s training",
        r"\| ranks \| per launch \| create \| open \|",
        r"\| 2 \| [1-9]\d* \| "]),  # requests were counted: the server's log names each
}


@pytest.fixture
def given(request, script) -> dict:
    """The session fixtures this script's main() takes, made (where no test made them yet) in setup, not call."""
    return {f: request.getfixturevalue(f) for f in EXPECTED[script][0]}


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_smoke_run_on_the_session_hosts_prints_its_rows(script, given, capsys, tmp_path):
    expected = EXPECTED[script][1]
    main = importlib.import_module(f"benchmarks.{script}").main
    json_file = tmp_path / "rows.json"
    rc = main(["--smoke", "--json", str(json_file)], **given)
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert out.startswith(SMOKE), out[:500]
    assert missing_lines(out, expected) == [], out[-4000:]
    assert json.loads(json_file.read_text()), "no rows in its --json file"
