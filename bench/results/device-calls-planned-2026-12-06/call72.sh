#!/usr/bin/env bash
# call 72 (planned at the end of 2026-12-07's fifth session): main's new bundle - rebuild
# .gpu first (prepare.sh main, then scripts/gpu_torch_op.sh for the native op with
# attn_varlen) - carrying this session's adoptions: the forward race fix (af817f5: an idle
# consumer waits for Q's phase; main's persistent-CTAs test's new case), trial window (the
# persistent window forward, 2114052; the window sanitizer test's new dense case: whole
# q-tiles without keys, never run yet), varlen-native (abd4f38), GQA's hashed-sum grid
# (d061626). Lanes: gpu_attn_fwd + gpu_attn; gpu_attn_vl + gpu_dashd; the forward and
# window/packed sanitizer targets; then test_gpu.py and issue 17's peers run
# (gpu_bench.sh --varlen: the window rows with the persistent forward).
# PEERS=0 skips the peers run (2026-12-07's sixth session: machines came rarely).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/wheels
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
left=$(( L - 200 ))
lane m1 MAIN_CHECKS="gpu_attn_fwd gpu_attn" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 2 )) OUT=$W/m1 bash scripts/gpu_trials.sh
lane m2 MAIN_CHECKS="gpu_attn_vl gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 2 )) OUT=$W/m2 bash scripts/gpu_trials.sh
lane san SANITIZE_ONLY='forward|_vl_' SANITIZER_TIMEOUT=$(( left / 6 )) BIN=.gpu/bin OUT=$W/san bash scripts/gpu_sanitize.sh
wait; T "lanes done"
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout 90 python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
echo "python test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" > $W/py.txt; T "py"
left=$(( L - 10 - $(( $(date +%s) - t0 )) ))
[ "${PEERS:-1}" = 1 ] && [ $left -gt 60 ] && { OUT=$W/vl timeout $left bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vl.log 2>&1; T "varlen peers rc $?"; }
{ echo "== sanitizers"; cat $W/lane-san.out; echo "== suites"; cat $W/m1/trials.log $W/m2/trials.log 2>/dev/null
  cat $W/py.txt; echo "== varlen peers"; grep -E "^## |^\| (dashd|cudnn-fe) |met" $W/vl/varlen-report.md 2>/dev/null; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call72.tgz -C $W .
cat $OUT/summary.txt
