#!/bin/sh
# Debian packages that the multi-host tests, multi-node launches and the browser tests need.
#
#   sudo scripts/install-system.sh        # CI runs it through `make test`
#
# Idempotent: installs only what `dpkg -s` reports missing, and runs
# `apt-get update` once, only when something is missing. No service starts:
# the test fixture runs its own sshd (and, later, munged/slurmd) per network
# namespace.
set -eu

# chromium and chromium-driver (the same version, Debian's): the tests open report.html in a real browser
# (tests/browser.py); about 40 s of this script on a machine without them (2026-12-06).
# postgresql: a real server for the history store's PostgreSQL tests (tests/pg_server.py starts its own cluster with
# initdb and pg_ctl in a temporary folder; the package's own cluster service is not used); its libpq5 is what
# psycopg (requirements-test.lock) loads.
PACKAGES="openssh-server openssh-client pdsh openmpi-bin libopenmpi-dev
iproute2 procps psmisc slurm-wlm munge libaio-dev sshfs socat chromium chromium-driver postgresql"

if [ "$(id -u)" -ne 0 ]; then
    echo "install-system.sh: must run as root (apt-get install)" >&2
    exit 1
fi

missing=""
for pkg in $PACKAGES; do
    # dpkg -s exits 0 also for removed-but-configured packages; check the status line.
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $pkg"
    fi
done

if [ -n "$missing" ]; then
    echo "install-system.sh: installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086 # word splitting of the package list is wanted
    apt-get install -y -q $missing
else
    echo "install-system.sh: all packages present" >&2
fi

# sshd refuses to start without its privilege-separation directory, and on a
# machine where the service never ran nobody has created it.
mkdir -p /run/sshd
chmod 0755 /run/sshd
