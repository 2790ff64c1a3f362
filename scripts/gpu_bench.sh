#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_bench.sh - run on the GPU machine (the device tool's `run`, after bundle.sh): our
# kernels and PyTorch's SDPA peers in one run, joined into one Markdown report under $OUT.
#   bash scripts/gpu_bench.sh COMMIT [--quick]
set -euo pipefail
commit=$1; shift
out=${OUT:-/tmp}
# the bundled binaries on the device machine, else those `make` built here
bin=${BIN:-$( [ -x .gpu/bin/bench_gpu ] && echo .gpu/bin || echo build )}
[ -d .gpu/lib ] && export LD_LIBRARY_PATH=$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
python3 bench/sdpa_peers.py "$@" > "$out/peers.json"
"$bin/bench_gpu" "$@" > "$out/ours.json"
python3 bench/gpu_report.py "$out/ours.json" "$out/peers.json" --commit "$commit" \
  --command "bash scripts/gpu_bench.sh $commit $*" > "$out/gpu-report.md"
cat "$out/gpu-report.md"
