#!/usr/bin/env bash
# call 18 (2026-12-06, fourth session): libdash's dash_cuda_tensors without a driver call for
# a tensor inside an allocation an earlier tensor of the call was found in - gpu_dashd and the
# Python GPU tests (native op) in lanes; then the small model's step with the native op, five
# rounds taking turns (dash, dash-ctypes, SDPA, strict SDPA), without and with MPS
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=150
lane mdash MAIN_CHECKS="gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mdash timeout 170 bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python timeout 170 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
{ cat $W/times.txt; cat $W/mdash/trials.log; grep -E "native|FAILED|seed" $W/lane-py.out; } > $OUT/summary.txt
mkdir -p $W/pc
MODELS=small REPS=5 ATTNS="sdpa sdpa-strict dash dash-ctypes" OUT=$W/pc \
  timeout $((L - 30 - $(date +%s) + t0)) bash scripts/gpu_percall.sh 20 > $W/pc/log.txt 2>&1; T "percall rc $?"
pkill -f nvidia-cuda-mps
{ for f in $W/pc/percall-*.md; do echo "== $f"; head -16 $f; done; echo "== steps"; cat $W/pc/steps.md; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call18.tgz -C $W .
cat $OUT/summary.txt
