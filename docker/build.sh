#!/bin/sh
# Build the vitbench image with its identity (bench version + requirements.lock
# hash), which the Dockerfile checks and `bench probe` reports per node.
#
#   docker/build.sh                                   # -> vitbench:latest
#   docker/build.sh --build-arg BASE_IMAGE=nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04@sha256:<digest>
#   VITBENCH_TAG=registry.example.org/vitbench:0.1.0 docker/build.sh
#
# Extra arguments go to `docker build` as they are. The context is the
# repository root, cut down by .dockerignore to what the image needs.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' bench/__init__.py)
lock_sha=$(sha256sum requirements.lock | cut -c1-64)
identity="vitbench-${version}+lock.$(printf %s "$lock_sha" | cut -c1-12)"
echo "docker/build.sh: building ${VITBENCH_TAG:-vitbench:latest} as ${identity}" >&2
exec docker build -f docker/Dockerfile -t "${VITBENCH_TAG:-vitbench:latest}" \
    --build-arg "VITBENCH_IMAGE=${identity}" --build-arg "LOCK_SHA256=${lock_sha}" "$@" .
