#!/bin/sh
# Build the vitbench image with its identity (bench version + the lock's hash),
# which the Dockerfile checks and `bench probe` reports per node.
#
#   docker/build.sh                                   # -> vitbench:latest (requirements.lock, CUDA 13.0 base)
#   docker/build.sh --variant pascal                  # -> vitbench:pascal (requirements-pascal.lock, CUDA 12.6 base)
#   docker/build.sh --variant rocm                    # -> vitbench:rocm (docker/Dockerfile.rocm, requirements-rocm.lock)
#   docker/build.sh --build-arg BASE_IMAGE=nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04@sha256:<digest>
#   VITBENCH_TAG=registry.example.org/vitbench:0.1.0 docker/build.sh
#
# The variants (which GPUs each one's torch has kernels for) are listed in
# bench/data/image_variants.json and docs/images.md. --variant must come
# first; the other arguments go to `docker build` as they are (a
# --build-arg BASE_IMAGE=... there overrides the variant's base). The context
# is the repository root, cut down by .dockerignore to what the image needs.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
variant=default
if [ "${1:-}" = "--variant" ]; then
    [ $# -ge 2 ] || { echo "docker/build.sh: --variant needs a name (default, pascal, rocm)" >&2; exit 2; }
    variant=$2
    shift 2
fi
dockerfile=docker/Dockerfile
case "$variant" in
    default) lock=requirements.lock tag=lock base=nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04 ;;
    rocm) lock=requirements-rocm.lock tag=rocm.lock dockerfile=docker/Dockerfile.rocm
          base=rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.6.0 ;;
    pascal) lock=requirements-pascal.lock tag=pascal.lock base=nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04 ;;
    *) echo "docker/build.sh: --variant: unknown '$variant' (default, pascal, rocm)" >&2; exit 2 ;;
esac
name=${VITBENCH_TAG:-vitbench:$( [ "$variant" = default ] && echo latest || echo "$variant" )}
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' bench/__init__.py)
lock_sha=$(sha256sum "$lock" | cut -c1-64)
identity="vitbench-${version}+${tag}.$(printf %s "$lock_sha" | cut -c1-12)"
echo "docker/build.sh: building ${name} (variant ${variant}, ${lock}) as ${identity}" >&2
exec docker build -f "$dockerfile" -t "$name" --build-arg "VARIANT=${variant}" \
    --build-arg "BASE_IMAGE=${base}" --build-arg "VITBENCH_IMAGE=${identity}" --build-arg "LOCK_SHA256=${lock_sha}" "$@" .
