#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_bench.sh - run on the GPU machine (the device tool's `run`, after bundle.sh): our
# kernels, PyTorch's SDPA peers and cuDNN's own SDPA (cuDNN frontend) in one run, joined
# into one Markdown report under $OUT.
#   bash scripts/gpu_bench.sh COMMIT [--quick] [--reps N] [--only D,S,MASK[,SCHED]]
#   [MPS=1] bash scripts/gpu_bench.sh COMMIT --varlen [varlen_peers.py's options]
#       only issue 17's packed-batch and sliding-window bench (bench/varlen_peers.py):
#       cuDNN's SDPA with ragged offsets and diagonal bands, PyTorch's flash kernels, and
#       the bundle's dashd (.gpu/bin/dashd, unpacked from dashd.xz where only that is
#       there); report $OUT/varlen-report.md (and varlen.json). MPS=1: everything (the
#       peers, the bench and the dashd it starts) runs under an MPS control daemon this
#       script starts in private directories and stops at the end - the setup the README
#       recommends for clients of dashd on the GPU (docs/mps.md); the report says which.
# The cuDNN frontend (module `cudnn`) is used as installed; where `import cudnn` fails and
# $WHEELS (default .gpu/wheels, see scripts/gpu_wheels.sh) holds its wheel, the wheel is
# installed into a temporary directory first, as the GPU machine has no network. Without
# either, the report says cuDNN's own SDPA was not measured, and the rest runs as before.
set -euo pipefail
commit=$1; shift
out=${OUT:-/tmp}
wheels=${WHEELS:-.gpu/wheels}
# the bundled binaries on the device machine, else those `make` built here
bin=${BIN:-$( [ -x .gpu/bin/bench_gpu ] && echo .gpu/bin || echo build )}
[ -d .gpu/lib ] && export LD_LIBRARY_PATH=$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"

# torch first, so that the frontend finds torch's libcudnn
pylib=
if ! python3 -c 'import torch, cudnn' 2>/dev/null && [ -d "$wheels" ]; then
  if ! python3 -m pip --version > /dev/null 2>&1; then  # no pip: a wheel is a zip
    for w in "$wheels"/*.whl; do python3 -m zipfile -e "$w" "$tmp/pylib"; done
    pylib=$tmp/pylib
  elif python3 -m pip install -q --no-deps --no-index --target "$tmp/pylib" "$wheels"/*.whl; then
    pylib=$tmp/pylib
  else
    echo "gpu_bench: the wheels in $wheels do not install for $(python3 -V)" >&2
  fi
fi

if [ "${1:-}" = --varlen ]; then
  shift
  dbin=${BIN:-build}  # the bundle's dashd where there is one, else this build's
  if [ -z "${BIN:-}" ] && { [ -e .gpu/bin/dashd ] || [ -e .gpu/bin/dashd.xz ]; }; then
    dbin=.gpu/bin
  fi
  [ -e "$dbin/dashd" ] || [ ! -f "$dbin/dashd.xz" ] || xz -dk "$dbin/dashd.xz"
  dbin=$(cd "$dbin" && pwd)
  sharing="separate contexts (no MPS)"
  if [ "${MPS:-0}" = 1 ]; then
    mps=$(command -v nvidia-cuda-mps-control || true)
    [ -n "$mps" ] || { echo "gpu_bench: MPS=1 but nvidia-cuda-mps-control is not here" >&2; exit 1; }
    export CUDA_MPS_PIPE_DIRECTORY=$tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=$tmp/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    "$mps" -d
    trap 'echo quit | "$mps" > /dev/null 2>&1 || true; sleep 1; rm -rf "$tmp"' EXIT
    sleep 1
    sharing="MPS (a control daemon started by gpu_bench.sh)"
  fi
  lib=$( [ -f .gpu/lib/libdash.so ] && echo "$PWD/.gpu/lib" || echo "$dbin" )
  DASH_LIBRARY=${DASH_LIBRARY:-$lib/libdash.so} \
  PYTHONPATH=$pylib${pylib:+:}$PWD/client/python${PYTHONPATH:+:$PYTHONPATH} \
    python3 bench/varlen_peers.py --dashd "$dbin/dashd" --out "$out" --commit "$commit" \
      --sharing "$sharing" --command "${MPS:+MPS=$MPS }bash scripts/gpu_bench.sh $commit --varlen $*" "$@"
  exit
fi

python3 bench/sdpa_peers.py "$@" > "$out/peers.json"
rc=0
PYTHONPATH=$pylib${pylib:+${PYTHONPATH:+:}}${PYTHONPATH:-} \
  python3 bench/cudnn_peers.py "$@" > "$out/cudnn.json" 2> "$out/cudnn-stderr.txt" || rc=$?
if [ "$rc" -ne 0 ]; then  # a peer that failed is a line in the report, not a lost run
  python3 -c 'import json, sys; json.dump({"note": sys.argv[1], "rows": []}, sys.stdout)' \
    "bench/cudnn_peers.py exited $rc: $(tail -n 1 "$out/cudnn-stderr.txt")" > "$out/cudnn.json"
fi

"$bin/bench_gpu" "$@" > "$out/ours.json"
python3 bench/gpu_report.py "$out/ours.json" "$out/peers.json" --cudnn "$out/cudnn.json" \
  --commit "$commit" --command "bash scripts/gpu_bench.sh $commit $*" > "$out/gpu-report.md"
cat "$out/gpu-report.md"
# the pictures: here where matplotlib is, else from the JSON files that come back
if python3 -c 'import matplotlib' 2> /dev/null; then
  python3 bench/gpu_plots.py "$out/ours.json" "$out/peers.json" --cudnn "$out/cudnn.json" \
    --prefix "$out/tflops" --title "$(head -n 1 "$out/gpu.txt" | cut -d, -f1), commit $commit"
else
  echo "plots: no matplotlib here; run bench/gpu_plots.py on ours.json, peers.json, cudnn.json"
fi
