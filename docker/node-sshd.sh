#!/bin/sh
# A multi-node container's sshd (compose profile `multinode`, or a cluster
# node running the image): host keys are made here, at start, so that no
# private key is ever part of the image, and sshd stays in the foreground as
# the container's main process. Runs as root; users log in as `bench` with
# the key mounted at /home/bench/.ssh/authorized_keys.
#
#   docker run --user root --entrypoint vitbench-sshd -v ~/.ssh/id_ed25519.pub:/home/bench/.ssh/authorized_keys:ro vitbench:latest
set -eu
ssh-keygen -A >/dev/null
mkdir -p /run/sshd
chmod 0755 /run/sshd
exec /usr/sbin/sshd -D -e "$@"
