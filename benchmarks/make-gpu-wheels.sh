#!/usr/bin/env bash
# Wheels for gpu-check.sh on a GPU machine without DeepSpeed and without a network.
#
#   benchmarks/make-gpu-wheels.sh [DIR]     # default benchmarks/wheels; needs PyPI (run it here, carry DIR there)
#
# DeepSpeed 0.19.8 ships as a source archive: `pip wheel --no-deps` builds its wheel (no CUDA toolkit
# needed, ops are JIT-built where used). Its dependencies and bench's own (rich, psutil, jsonschema) come
# as binary wheels for CPython 3.11 and 3.12 (the image's). torch, timm and the CUDA libraries are not
# fetched: the GPU machine has them (gigabytes).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-benchmarks/wheels}
PY=${PY:-.venv/bin/python}
mkdir -p "$DIR"
$PY -m pip wheel -q --no-deps -w "$DIR" deepspeed==0.19.8
for pyver in 3.11 3.12; do
  $PY -m pip download -q --only-binary=:all: --python-version "$pyver" --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$DIR" \
      $(grep -v '^#' benchmarks/gpu-wheels.txt | grep -v '^deepspeed' | tr '\n' ' ')
done
ls -la "$DIR"
