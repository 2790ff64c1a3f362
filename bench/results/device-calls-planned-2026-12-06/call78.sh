#!/usr/bin/env bash
# call 78 (2026-12-07's eighth session, with under ~520 s of device time left after eight
# refused starts): the part of call 72 that checks main's untested code - gpu_dashd (the
# four semaphore / restore / lost-context tests never run, on the split test files),
# test_gpu.py (three Python GPU tests never run), gpu_attn_vl and gpu_attn_fwd (the
# never-run dense window case and the persistent forward's race case). No sanitizers, no
# peers run: call 72 keeps those.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
left=$(( L - 40 ))
lane m2 MAIN_CHECKS="gpu_dashd gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/m2 bash scripts/gpu_trials.sh
lane m1 MAIN_CHECKS="gpu_attn_fwd" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/m1 bash scripts/gpu_trials.sh
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout 90 python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
echo "python test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" > $W/py.txt; T "py"
wait; T "lanes done"
{ echo "== suites"; cat $W/m2/trials.log $W/m1/trials.log 2>/dev/null; cat $W/py.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call78.tgz -C $W .
cat $OUT/summary.txt
