#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_wheels.sh - here (network, no GPU): download the Python wheels the GPU machine needs
# but cannot fetch, as it has no network.
#   bash scripts/gpu_wheels.sh [DEST]         the cuDNN frontend, which bench/cudnn_peers.py
#                                             calls (scripts/gpu_bench.sh installs it from
#                                             DEST, default .gpu/wheels); no dependencies:
#                                             the SDPA graphs need none
#   WHAT=hf bash scripts/gpu_wheels.sh [DEST] Hugging Face transformers at the version of
#                                             client/python/requirements-test.txt, with its
#                                             dependencies (scripts/gpu_hf.sh installs them
#                                             from DEST, default .gpu/wheels-hf; ~29 MB: carry
#                                             them with a bundle of dashd and libdash only)
# PYVER (default 3.12) is the GPU machine's Python; only its x86_64 manylinux wheels are
# taken.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pyver=${PYVER:-3.12}
plats=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
if [ "${WHAT:-cudnn}" = hf ]; then
  dest=${1:-.gpu/wheels-hf}
  pkg=$(grep -E '^transformers==' "$root/client/python/requirements-test.txt")
  mkdir -p "$dest"
  # pytest too: the GPU machine's Python has PyTorch but need not have pytest
  python3 -m pip download -q "$pkg" pytest --only-binary=:all: --python-version "$pyver" \
    "${plats[@]/#/--platform=}" -d "$dest"
  # numpy is there with PyTorch, and its wheel alone (16 MB) would take the bundle past
  # the device tool's 64 MiB
  rm -f "$dest"/numpy-*.whl
  du -sh "$dest"
  exit 0
fi
dest=${1:-.gpu/wheels}
pkg=nvidia-cudnn-frontend==1.32.0
mkdir -p "$dest"
for tag in "${plats[@]}"; do
  if python3 -m pip download -q "$pkg" --no-deps --only-binary=:all: --python-version "$pyver" \
       --platform "$tag" -d "$dest"; then
    ls -l "$dest"
    exit 0
  fi
done
echo "gpu_wheels: no x86_64 manylinux wheel of $pkg for Python $pyver" >&2
exit 1
