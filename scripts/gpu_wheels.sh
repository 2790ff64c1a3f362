#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_wheels.sh - here (network, no GPU): download the Python wheels the GPU machine's
# benchmarks need but cannot fetch, as it has no network; today the cuDNN frontend, which
# bench/cudnn_peers.py calls (scripts/gpu_bench.sh installs it from .gpu/wheels).
#   bash scripts/gpu_wheels.sh [DEST]          DEST defaults to .gpu/wheels
# PYVER (default 3.12) is the GPU machine's Python; only its x86_64 manylinux wheels are
# taken, the first platform tag that resolves. No dependencies: the SDPA graphs need none
# (the frontend's extras load on demand).
set -euo pipefail
dest=${1:-.gpu/wheels}
pyver=${PYVER:-3.12}
pkg=nvidia-cudnn-frontend==1.32.0
mkdir -p "$dest"
for tag in manylinux_2_27_x86_64 manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  if python3 -m pip download -q "$pkg" --no-deps --only-binary=:all: --python-version "$pyver" \
       --platform "$tag" -d "$dest"; then
    ls -l "$dest"
    exit 0
  fi
done
echo "gpu_wheels: no x86_64 manylinux wheel of $pkg for Python $pyver" >&2
exit 1
