#!/usr/bin/env bash
# call 17 (2026-12-06, fourth session): issue 20's native op (client/torch/dash_torch.h,
# dash_attn/_native.py; .gpu/lib/libdash_torch_2.11.0+cu130.so from scripts/gpu_torch_op.sh)
# - the Python GPU tests with it (the default path now; its bits against the ctypes path,
# second-order refusal), then percall (native and ctypes rows beside SDPA) and the two models'
# steps, dash native / dash ctypes / SDPA / strict SDPA in rounds taking turns, no MPS
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout 150 python3 client/python/tests/test_gpu.py > $W/test_gpu.out 2>&1; T "test_gpu rc $?"
{ cat $W/times.txt; grep -E "native|FAILED|seed" $W/test_gpu.out; } > $OUT/summary.txt
mkdir -p $W/pc
NO_MPS=1 MODELS="small large" REPS=3 ATTNS="sdpa sdpa-strict dash dash-ctypes" OUT=$W/pc \
  timeout $((L - 40 - $(date +%s) + t0)) bash scripts/gpu_percall.sh 20 > $W/pc/log.txt 2>&1; T "percall rc $?"
{ echo "== percall"; head -30 $W/pc/percall-contexts.md; echo "== steps"; cat $W/pc/steps.md; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call17.tgz -C $W .
cat $OUT/summary.txt
