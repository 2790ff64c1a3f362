#!/usr/bin/env bash
# call 29 (planned 2026-12-06, fifth session, for the next one): trial headdims
# (headdims-trial-2026-12-06.md: every multiple of 8 up to 256 on the GPU, widened to the
# next of 64, 128, 256) - its gpu_attn, gpu_attn_vl and gpu_dashd suites in lanes, then the
# Python GPU tests with its dashd.
L=${LIMIT:-500}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=300
lane attn CHECKS="gpu_attn" TRIALS=headdims AB_TRIALS=none OUT=$W/attn timeout 320 bash scripts/gpu_trials.sh
lane vl CHECKS="gpu_attn_vl gpu_dashd" TRIALS=headdims AB_TRIALS=none OUT=$W/vl timeout 320 bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/trial-headdims/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  PYTHONPATH=$PWD/client/python timeout 300 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
{ cat $W/times.txt; for d in attn vl; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== py"; grep -E "refus|FAILED|seed" $W/lane-py.out; } > $OUT/summary.txt
tar czf $OUT/call29.tgz -C $W .
cat $OUT/summary.txt
