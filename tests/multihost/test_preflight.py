"""bench.preflight against real hosts (netns + sshd, see netns.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.core.errors import RunFailed
from bench.cluster.preflight import check_or_raise, preflight, probe_here

pytestmark = pytest.mark.multihost


def _python_with_fake_deepspeed(tmp_path: Path, version: str) -> Path:
    """An interpreter whose importlib.metadata sees another deepspeed first on sys.path."""
    site = tmp_path / "site"
    dist = site / f"deepspeed-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_all_hosts_pass(cluster):
    checks = check_or_raise(cluster.hosts, env=cluster.env)
    assert [c.host for c in checks] == cluster.hosts
    assert [c.hostname for c in checks] == cluster.hostnames
    here = probe_here()
    assert all(c.versions == here["versions"] and c.python == here["python"] for c in checks)


def test_stopped_sshd_fails_by_name(cluster):
    down = cluster.hosts[0]
    cluster.stop_sshd(down)
    try:
        with pytest.raises(RunFailed) as exc:
            check_or_raise(cluster.hosts, timeout=15, env=cluster.env)
    finally:
        cluster.start_sshd(down)
    lines = str(exc.value).splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"preflight: {down}: unreachable (ssh: connect to host {down} port 22")
    assert "refused" in lines[0]


def test_every_failing_host_is_in_one_message(cluster):
    first, last = cluster.hosts[0], cluster.hosts[-1]
    cluster.stop_sshd(first)
    cluster.link_down(last)
    try:
        with pytest.raises(RunFailed) as exc:
            check_or_raise(cluster.hosts, timeout=15, env=cluster.env)
    finally:
        cluster.start_sshd(first)
        cluster.link_up(last)
    named = [line.split(": ")[1] for line in str(exc.value).splitlines()]
    assert named == [first, last]


def test_missing_python_is_named(cluster):
    checks = preflight(cluster.hosts[:2], env=cluster.env, python="/nonexistent/bin/python3")
    assert [c.message() for c in checks] == [
        f"preflight: {h}: python missing (/nonexistent/bin/python3 not found there)"
        for h in cluster.hosts[:2]
    ]


def test_other_deepspeed_version_is_named(cluster, tmp_path: Path):
    here = probe_here()["versions"]["deepspeed"]
    python = _python_with_fake_deepspeed(tmp_path, "0.0.1")
    checks = preflight(cluster.hosts[1:2], env=cluster.env, python=str(python))
    assert checks[0].message() == f"preflight: {cluster.hosts[1]}: deepspeed 0.0.1 != {here} here"
