"""bench.remote and bench.preflight on this machine only: real local processes, no ssh."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from pathlib import Path

import pytest

# Every test here runs commands on this machine through bench.cluster.remote.
pytestmark = pytest.mark.process

from bench.core.errors import RunFailed
from bench.cluster.preflight import check_or_raise, preflight
from bench.cluster.remote import is_local, run_on_hosts, ssh_argv


def test_ssh_argv_exact():
    assert ssh_argv("node1", ["hostname"]) == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "-o", "StrictHostKeyChecking=accept-new", "node1", "--", "hostname",
    ]  # fmt: skip


def test_ssh_argv_quotes_the_remote_command_as_one_word():
    argv = ["python", "-c", "print('a b'); import os", "x;rm -rf /", "$HOME"]
    cmd = ssh_argv("10.0.0.7", argv, connect_timeout=3)
    assert cmd[:8] == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3",
        "-o", "StrictHostKeyChecking=accept-new", "10.0.0.7",
    ]  # fmt: skip
    assert cmd[8:] == ["--", shlex.join(argv)]
    assert shlex.split(cmd[-1]) == argv


@pytest.mark.parametrize(
    "host",
    ["-oProxyCommand=touch${IFS}marker", "-p2222", "", "node 1", "node1\n", "a\tb"],
)
def test_ssh_argv_refuses_hosts_that_could_become_options(host):
    with pytest.raises(ValueError, match="refusing host"):
        ssh_argv(host, ["hostname"])


def test_run_on_hosts_refuses_bad_host_before_running_anything(tmp_path: Path):
    marker = tmp_path / "ran"
    with pytest.raises(ValueError):
        run_on_hosts(["localhost", "-oProxyCommand=x"], ["touch", str(marker)])
    assert not marker.exists()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"])
def test_loopback_is_local(host):
    assert is_local(host)


def test_own_hostname_is_local():
    assert is_local(socket.gethostname())


@pytest.mark.parametrize("host", ["10.77.0.2", "node1-not-this-machine", "8.8.8.8"])
def test_other_hosts_are_not_local(host):
    assert not is_local(host)


def test_local_hosts_run_directly_in_host_order():
    hosts = ["127.0.0.3", "localhost", "127.0.0.2"]
    argv = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", "a b", "c;d"]
    results = run_on_hosts(hosts, argv)
    assert list(results) == hosts
    for host, r in results.items():
        assert r.host == host and r.ok and r.error is None
        assert json.loads(r.stdout) == ["a b", "c;d"]


def test_exit_status_and_stderr_come_back():
    r = run_on_hosts(["localhost"], ["sh", "-c", "echo oops >&2; exit 4"])["localhost"]
    assert (r.rc, r.stderr, r.error, r.ok) == (4, "oops\n", None, False)


def test_env_is_the_local_processes_environment():
    env = dict(os.environ, VITBENCH_PROBE="42")
    r = run_on_hosts(["localhost"], ["sh", "-c", "echo $VITBENCH_PROBE"], env=env)["localhost"]
    assert r.stdout == "42\n"


def test_missing_command_is_an_error_not_an_exception():
    r = run_on_hosts(["localhost"], ["/nonexistent/tool"])["localhost"]
    assert r.rc is None and r.error is not None and r.error.startswith("/nonexistent/tool:")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_timeout_kills_the_whole_process_group(tmp_path: Path):
    pidfile = tmp_path / "bg.pid"
    # The shell's background child must die too: it is in the group we started.
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    r = run_on_hosts(["localhost"], ["sh", "-c", script], timeout=1)["localhost"]
    assert r.rc is None and r.error == "timeout after 1s"
    assert not _alive(int(pidfile.read_text()))


def test_no_hosts_no_results():
    assert run_on_hosts([], ["hostname"]) == {}


# preflight, with this machine as the only host


def test_preflight_passes_here():
    (check,) = preflight(["localhost"])
    assert check.ok and check.problems == []
    assert check.hostname == socket.gethostname()
    assert set(check.versions) == {"vitbench", "torch", "torchvision", "deepspeed", "timm"}


def test_preflight_names_missing_python():
    with pytest.raises(RunFailed) as exc:
        check_or_raise(["localhost", "127.0.0.1"], python="/nonexistent/python3")
    assert str(exc.value).splitlines() == [
        "preflight: localhost: python missing (/nonexistent/python3 not found there)",
        "preflight: 127.0.0.1: python missing (/nonexistent/python3 not found there)",
    ]


def test_preflight_names_a_version_difference(tmp_path: Path):
    site = tmp_path / "site"
    (site / "timm-0.0.9.dist-info").mkdir(parents=True)
    (site / "timm-0.0.9.dist-info" / "METADATA").write_text("Name: timm\nVersion: 0.0.9\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (check,) = preflight(["localhost"], python=str(python))
    here = preflight(["localhost"])[0].versions["timm"]
    assert check.problems == [f"timm 0.0.9 != {here} here"]
