#!/usr/bin/env bash
# call 35 (planned 2026-12-06, sixth session, for the next one): main after a8f249e (the
# review of the head dims: 96 with windows on a v1 object, dashd's refusals of 24 and 264 and
# the session after them, windows refusing 136 and 200; the fused-leaves test at widened
# dims) - gpu_attn, gpu_attn_vl, gpu_dashd and the Python GPU tests in lanes. Needs main's bundle at a8f249e or later (prepare.sh main).
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
lane attn MAIN_CHECKS="gpu_attn" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/attn timeout 220 bash scripts/gpu_trials.sh
lane vl MAIN_CHECKS="gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/vl timeout 220 bash scripts/gpu_trials.sh
lane dashd MAIN_CHECKS="gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/dashd timeout 220 bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  PYTHONPATH=$PWD/client/python timeout 200 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
{ cat $W/times.txt; for d in attn vl dashd; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== py"; grep -E "FAILED|seed" $W/lane-py.out; } > $OUT/summary.txt
tar czf $OUT/call35.tgz -C $W .
cat $OUT/summary.txt
