#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_torch_op.sh - here (not on the GPU machine): the Python binding's native op
# (client/torch/dash_torch.h) built for the GPU machine's torch, into .gpu/lib beside the
# bundle's libdash (where dash_attn looks for it). The op's ABI is its torch version's, so
# it is built against that version's headers and libraries, taken from its wheel on PyPI
# (downloaded once into $TORCH_WHEELS, default /tmp/dash-torch-wheels; about 530 MB).
#   bash scripts/gpu_torch_op.sh [VERSION]     (default 2.11.0, the GPU machine's: +cu130)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ver=${1:-2.11.0}
cache=${TORCH_WHEELS:-/tmp/dash-torch-wheels}
py=$root/.venv/bin/python
[ -x "$py" ] || py=python3
mkdir -p "$cache"
whl=$(ls "$cache"/torch-"$ver"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ]; then
  "$py" -m pip download -q --no-deps --python-version 3.11 --platform manylinux_2_28_x86_64 --only-binary=:all: "torch==$ver" -d "$cache"
  whl=$(ls "$cache"/torch-"$ver"-*.whl | head -1)
fi
dir=$cache/torch-$ver
[ -e "$dir/torch/version.py" ] || unzip -q -o "$whl" 'torch/include/*' 'torch/lib/*' 'torch/version.py' -d "$dir"
make -C "$root" --no-print-directory torch-op TORCH_DIR="$dir/torch"
full=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$dir/torch/version.py")
cp "$root/build/libdash_torch_$full.so" "$root/.gpu/lib/"
echo "gpu_torch_op.sh: .gpu/lib/libdash_torch_$full.so"
