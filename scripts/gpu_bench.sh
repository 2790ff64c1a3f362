#!/usr/bin/env bash
# gpu_bench.sh - run on the GPU machine (the device tool's `run`, after bundle.sh): our
# kernels and PyTorch's SDPA peers in one run, joined into one Markdown report under $OUT.
#   bash scripts/gpu_bench.sh COMMIT [--quick]
set -euo pipefail
commit=$1; shift
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
python3 bench/sdpa_peers.py "$@" > "$out/peers.json"
./.gpu/bin/bench_gpu "$@" > "$out/ours.json"
python3 bench/gpu_report.py "$out/ours.json" "$out/peers.json" --commit "$commit" \
  --command "bash scripts/gpu_bench.sh $commit $*" > "$out/gpu-report.md"
cat "$out/gpu-report.md"
