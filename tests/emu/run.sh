#!/usr/bin/env bash
# Digest version 3's device-only code paths run on the CPU (no GPU): the __CUDA_ARCH__
# branches of xxh3.h (key words from the device's table, PTX mul.wide.u32, __umul64hi,
# 16-byte reads), digest_leaf.cuh's warp forms (quad split, quad transpose), digest_cuda.cu's
# leaf_warp and bwd_wgmma.cuh's bwd_wg_tile_leaves, each against libxxhash's XXH3_64bits.
# digest3_device_emu.py copies those sources with the inline PTX replaced by C shims
# (emu_cuda.h: a warp is 32 host threads); a patch that no longer matches fails loudly.
#   bash tests/emu/run.sh            (needs g++, python3, libxxhash-dev)
#   EMU_MUTANT=1|2 bash tests/emu/run.sh   a wrong mul.wide / __umul64hi shim: must FAIL
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/digest3_device_emu.py" "$root" "$tmp/inc" >/dev/null
g++ -std=c++17 -O2 -Wall -Wextra -Wno-unknown-pragmas -DEMU_MUTANT="${EMU_MUTANT:-0}" -I "$tmp/inc" -I "$here" \
    "$here/test_digest3_device_emu.cpp" -o "$tmp/emu" -lxxhash -lpthread
"$tmp/emu"
