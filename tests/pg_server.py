"""A real PostgreSQL server for the history store's tests: Debian's postgresql package (scripts/install-system.sh),
a cluster made by initdb in a temporary folder, listening on a Unix socket only, stopped and removed after.

    with server() as url:          # postgresql:///postgres?host=/tmp/.../sock&user=nobody
        ...

initdb refuses to run as root: as root the cluster is nobody's (runuser), else the user's own.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Iterator


def binary(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


@contextlib.contextmanager
def server() -> Iterator[str]:
    import pytest

    initdb, pg_ctl = binary("initdb"), binary("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server binaries (scripts/install-system.sh installs Debian's postgresql)")
    root = os.geteuid() == 0
    user = "nobody" if root else pwd.getpwuid(os.geteuid()).pw_name
    as_user = ["runuser", "-u", user, "--"] if root else []
    top = tempfile.mkdtemp(prefix="bench-pg-", dir="/tmp")  # short: a socket's path is at most 107 bytes
    sock, data = os.path.join(top, "sock"), os.path.join(top, "data")
    os.mkdir(sock)
    if root:
        entry = pwd.getpwnam(user)
        for path in (top, sock):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    run = dict(capture_output=True, text=True, timeout=120)
    try:
        made = subprocess.run([*as_user, initdb, "-D", data, "-A", "trust", "-U", user, "-N", "-E", "UTF8",
                               "--no-instructions"], **run)
        assert made.returncode == 0, made.stderr
        started = subprocess.run([*as_user, pg_ctl, "-D", data, "-l", os.path.join(top, "log"), "-w", "-o",
                                  f"-k {sock} -c listen_addresses= -c fsync=off", "start"], **run)
        assert started.returncode == 0, started.stderr + open(os.path.join(top, "log")).read()
        try:
            yield f"postgresql:///postgres?host={sock}&user={user}"
        finally:
            subprocess.run([*as_user, pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], **run)
    finally:
        shutil.rmtree(top, ignore_errors=True)
