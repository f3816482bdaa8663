#!/usr/bin/env bash
# Wheels for gpu-check.sh on a GPU machine without DeepSpeed and without a network, one folder per Python.
#
#   benchmarks/make-gpu-wheels.sh [DIR]     # default benchmarks/wheels; needs PyPI (run it here, carry DIR there)
#   -> DIR/cp311/*.whl, DIR/cp312/*.whl     # gpu-check.sh installs the folder of its $PY's version
#
# DeepSpeed 0.19.8 ships as a source archive: `pip wheel --no-deps` builds its wheel (pure Python, no CUDA
# toolkit needed, ops are JIT-built where used), copied into each folder. Its dependencies and bench's own
# (rich, psutil, jsonschema) come as binary wheels for CPython 3.11 and 3.12 (the image's), each Python's in its
# own folder: in one folder `pip install DIR/*.whl` met the other Python's wheels and failed. torch, timm and
# the CUDA libraries are not fetched: the GPU machine has them (gigabytes).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-benchmarks/wheels}
PY=${PY:-.venv/bin/python}
mkdir -p "$DIR/any"
$PY -m pip wheel -q --no-deps -w "$DIR/any" deepspeed==0.19.8
for pyver in 3.11 3.12; do
  dest="$DIR/cp${pyver/./}"
  mkdir -p "$dest"
  cp "$DIR"/any/deepspeed-*.whl "$dest"/
  $PY -m pip download -q --only-binary=:all: --python-version "$pyver" --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$dest" \
      $(grep -v '^#' benchmarks/gpu-wheels.txt | grep -v '^deepspeed' | tr '\n' ' ')
done
rm -r "$DIR/any"
ls -la "$DIR"/cp*
